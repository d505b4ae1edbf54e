package vmmigration

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/kubeapi"
)

// TestControllerStoppedAtEachStep: the controller stops (its leader
// lost, its process killed) at each step of a migration, and a new one
// starts: the migration ends Succeeded, once: one target pod made, the
// source deleted once, the VM's answers relayed in order.
func TestControllerStoppedAtEachStep(t *testing.T) {
	for _, step := range []string{"target running", "mid-stream", "after the switch-over"} {
		t.Run(step, func(t *testing.T) {
			hit := make(chan struct{})
			once := func() {
				select {
				case <-hit:
				default:
					close(hit)
				}
			}
			b := behaviour{}
			switch step {
			case "target running":
				b.onTargetRun = once
			case "mid-stream":
				b.onProgress = once
			default:
				b.onFinish = once
			}
			r := newRig(t, b, 20*time.Second, vmPod("vm1", "node1"))
			r.ask(t, "mig", "vm1", "node2")
			select {
			case <-hit:
			case <-time.After(10 * time.Second):
				t.Fatal("the step never came")
			}
			r.stop()
			time.Sleep(50 * time.Millisecond) // what the agents write meanwhile
			r.start(t)
			m := r.waitFinal(t, "mig")
			wantEnd(t, m, kubeapi.VMMigrationSucceeded, "Migrated", "downtime 80 ms")
			if getPod(t, r.client, "vm1") != nil || getPod(t, r.client, migTarget) == nil {
				t.Fatal("the source pod is still there, or the target is gone")
			}
			creates, deletes := 0, 0
			for _, a := range r.client.Actions() {
				if a.GetResource().Resource != "pods" {
					continue
				}
				switch a.GetVerb() {
				case "create":
					creates++
				case "delete":
					deletes++
				}
			}
			if creates != 1 || deletes != 1 {
				t.Errorf("%d pods created, %d deleted; want one target made and the source deleted once", creates, deletes)
			}
			requireProtocolOrder(t, r.client)
		})
	}
}

// TestCaps: with one migration allowed per node, the second of node1's
// waits Pending, saying why, and starts once the first ends.
func TestCaps(t *testing.T) {
	hold := make(chan struct{})
	r := newRig(t, behaviour{onTargetRun: func() { <-hold }}, 20*time.Second, vmPod("vm1", "node1"), vmPod("vm2", "node1"))
	r.stop()
	r.ctl.Caps = Caps{PerNode: 1}
	r.start(t)
	r.ask(t, "mig", "vm1", "node2")
	waitPhase(t, r, "mig", func(p string) bool { return p != "" && p != kubeapi.VMMigrationPending })
	r.askUID(t, "mig2", "vm2", "node2", "uid-mig2")
	m2 := waitPhase(t, r, "mig2", func(p string) bool { return p == kubeapi.VMMigrationPending })
	if m2.Status.Message != "waiting: 1 migrations leaving node1, the cap (--max-migrations-per-node)" {
		t.Errorf("the waiting migration says %q", m2.Status.Message)
	}
	close(hold)
	wantEnd(t, r.waitFinal(t, "mig"), kubeapi.VMMigrationSucceeded, "Migrated")
	wantEnd(t, r.waitFinal(t, "mig2"), kubeapi.VMMigrationSucceeded, "Migrated")
}

func waitPhase(t *testing.T, r *rig, name string, ok func(string) bool) *kubeapi.VMMigration {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := r.store.Get(t.Context(), testNS, name)
		if err == nil && ok(m.Status.Phase) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("migration %s: %+v, %v", name, m, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTargetAvoidsTheSourceNodeOnly: a migration without a node keeps
// its target off the source's node (a node affinity term, noted on the
// target); the next migration of that target drops the term for its own,
// and one to a named node carries none of them; the user's own terms
// stay.
func TestTargetAvoidsTheSourceNodeOnly(t *testing.T) {
	own := corev1.NodeSelectorRequirement{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}
	s := vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{own}}}}}}
	})
	r := newRig(t, behaviour{noAgents: true}, time.Minute, s)
	w := &worker{client: r.client}
	mig := func(name, node string) *kubeapi.VMMigration {
		return &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
			Spec: kubeapi.VMMigrationSpec{Pod: "vm1", TargetNode: node}}
	}
	terms := func(p *corev1.Pod) []corev1.NodeSelectorRequirement {
		return p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
	}
	t1, err := w.createTarget(t.Context(), mig("a", ""), s)
	if err != nil {
		t.Fatal(err)
	}
	notIn := func(node string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	}
	if got := terms(t1); !reflect.DeepEqual(got, []corev1.NodeSelectorRequirement{own, notIn("node1")}) || t1.Annotations[kubeapi.AnnotationAvoidedNode] != "node1" {
		t.Fatalf("the first target's terms %+v, avoided %q", got, t1.Annotations[kubeapi.AnnotationAvoidedNode])
	}
	t1.Spec.NodeName = "node2" // scheduled
	t2, err := w.createTarget(t.Context(), mig("b", ""), t1)
	if err != nil {
		t.Fatal(err)
	}
	if got := terms(t2); !reflect.DeepEqual(got, []corev1.NodeSelectorRequirement{own, notIn("node2")}) || t2.Annotations[kubeapi.AnnotationAvoidedNode] != "node2" {
		t.Fatalf("the second target's terms %+v, avoided %q", got, t2.Annotations[kubeapi.AnnotationAvoidedNode])
	}
	t3, err := w.createTarget(t.Context(), mig("c", "node1"), t1)
	if err != nil {
		t.Fatal(err)
	}
	if got := terms(t3); !reflect.DeepEqual(got, []corev1.NodeSelectorRequirement{own}) || t3.Annotations[kubeapi.AnnotationAvoidedNode] != "" {
		t.Fatalf("the named node's target's terms %+v, avoided %q", got, t3.Annotations[kubeapi.AnnotationAvoidedNode])
	}
}

// TestCancelDropsAnUnrecordedTarget: a controller died after it made the
// target pod and before its status said so; the user cancels: the next
// controller ends the migration and deletes that pod, which it finds by
// the migration's name and label.
func TestCancelDropsAnUnrecordedTarget(t *testing.T) {
	r := newRig(t, behaviour{noAgents: true}, time.Minute, vmPod("vm1", "node1"))
	r.stop()
	orphan := vmPod(migTarget, "node2", func(p *corev1.Pod) {
		p.Labels[kubeapi.LabelVMMigration] = "mig"
		p.Annotations[kubeapi.AnnotationMigrateFrom] = testNS + "/vm1"
	})
	if _, err := r.client.CoreV1().Pods(testNS).Create(t.Context(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.ask(t, "mig", "vm1", "node2")
	setCancel(t, r, "mig")
	r.start(t)
	wantEnd(t, r.waitFinal(t, "mig"), kubeapi.VMMigrationFailed, "Cancelled", "before it started")
	if getPod(t, r.client, migTarget) != nil {
		t.Error("the target pod an earlier controller made is still there")
	}
}
