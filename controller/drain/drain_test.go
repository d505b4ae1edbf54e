package drain

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/kubeapi"
)

const ns = "default"

func vmPod(name, node, eviction string) *corev1.Pod {
	vm := "vm"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node, RuntimeClassName: &vm},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if eviction != "" {
		p.Annotations[kubeapi.AnnotationEviction] = eviction
	}
	return p
}

func node(name string, cordoned bool) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
}

type rig struct {
	client *fake.Clientset
	store  vmmigration.Store
	ctl    *Controller
}

func newRig(t *testing.T, def string, objs ...runtime.Object) *rig {
	t.Helper()
	r := &rig{client: fake.NewClientset(objs...)}
	r.store = vmmigration.Store{Client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{vmmigration.GVR: kubeapi.VMMigrationKind + "List"})}
	r.ctl = &Controller{Client: r.client, Migrations: r.store, Eviction: def, RuntimeClasses: []string{"vm", "vm-instant"},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.ctl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func eventually(t *testing.T, what string, ok func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *rig) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := r.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type errText string

func (e errText) Error() string { return string(e) }

// TestProtect: a VM pod asking for live migration gets its budget
// (maxUnavailable 0, selecting its label); one not asking, and a
// container pod, get none; with the default set, every VM pod does;
// a budget whose pod is gone goes.
func TestProtect(t *testing.T) {
	ctr := vmPod("ctr", "node1", kubeapi.EvictionLiveMigrate)
	ctr.Spec.RuntimeClassName = nil
	r := newRig(t, "", node("node1", false), vmPod("vm1", "node1", kubeapi.EvictionLiveMigrate), vmPod("vm2", "node1", ""), ctr)
	eventually(t, "vm1's budget", func() error {
		b, err := r.client.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), "crimux-vm-vm1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.Spec.MaxUnavailable == nil || b.Spec.MaxUnavailable.IntVal != 0 || b.Spec.Selector.MatchLabels[kubeapi.LabelEvictionPDB] != "crimux-vm-vm1" {
			return errText("budget spec " + b.Spec.String())
		}
		if r.pod(t, "vm1").Labels[kubeapi.LabelEvictionPDB] != "crimux-vm-vm1" {
			return errText("vm1 not labelled")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	l, _ := r.client.PolicyV1().PodDisruptionBudgets(ns).List(context.Background(), metav1.ListOptions{})
	if len(l.Items) != 1 {
		t.Fatalf("%d budgets, want vm1's alone", len(l.Items))
	}
	for _, name := range []string{"vm2", "ctr"} {
		if _, ok := r.pod(t, name).Labels[kubeapi.LabelEvictionPDB]; ok {
			t.Errorf("pod %s labelled", name)
		}
	}
	if err := r.client.CoreV1().Pods(ns).Delete(context.Background(), "vm1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "vm1's budget gone", func() error {
		l, _ := r.client.PolicyV1().PodDisruptionBudgets(ns).List(context.Background(), metav1.ListOptions{})
		if len(l.Items) != 0 {
			return errText("a budget left")
		}
		return nil
	})
}

// TestProtectByDefault: the controller's default strategy protects VM
// pods without the annotation; shutdown on a pod opts out.
func TestProtectByDefault(t *testing.T) {
	r := newRig(t, kubeapi.EvictionLiveMigrate, node("node1", false), vmPod("vm1", "node1", ""), vmPod("vm2", "node1", kubeapi.EvictionShutdown))
	eventually(t, "vm1 protected", func() error {
		if r.pod(t, "vm1").Labels[kubeapi.LabelEvictionPDB] == "" {
			return errText("vm1 not labelled")
		}
		return nil
	})
	if _, ok := r.pod(t, "vm2").Labels[kubeapi.LabelEvictionPDB]; ok {
		t.Error("vm2 (shutdown) protected")
	}
}

// TestCordonedNodeMoves: on a cordoned node, each protected VM gets one
// migration (the scheduler's target, labelled with the node), and no
// other while it is under way; VMs elsewhere, and unprotected ones, none.
func TestCordonedNodeMoves(t *testing.T) {
	r := newRig(t, "", node("node1", true), node("node2", false),
		vmPod("vm1", "node1", kubeapi.EvictionLiveMigrate), vmPod("vm2", "node2", kubeapi.EvictionLiveMigrate), vmPod("vm3", "node1", ""))
	var m *kubeapi.VMMigration
	eventually(t, "a migration of vm1", func() error {
		migs, _, err := r.store.List(context.Background())
		if err != nil {
			return err
		}
		if len(migs) != 1 {
			return errText("want one migration")
		}
		m = migs[0]
		return nil
	})
	if m.Spec.Pod != "vm1" || m.Spec.TargetNode != "" || m.Labels[LabelDrainNode] != "node1" || !strings.HasPrefix(m.Name, "vm1-drain-") {
		t.Fatalf("migration %+v", m)
	}
	time.Sleep(300 * time.Millisecond)
	if migs, _, _ := r.store.List(context.Background()); len(migs) != 1 {
		t.Fatalf("%d migrations while the first is under way", len(migs))
	}
}

// TestCannotMove: a drain migration refused for a node-local volume is
// reported on the pod and the node, and sets the pod's LiveMigratable
// condition; a live-migrate pod keeps blocking (protected), a
// live-migrate-or-shutdown one is let go (its label emptied, its budget
// gone).
func TestCannotMove(t *testing.T) {
	for _, strategy := range []string{kubeapi.EvictionLiveMigrate, kubeapi.EvictionLiveMigrateOrShutdown} {
		t.Run(strategy, func(t *testing.T) {
			r := newRig(t, "", node("node1", true), vmPod("vm1", "node1", strategy))
			var m *kubeapi.VMMigration
			eventually(t, "a migration of vm1", func() error {
				migs, _, err := r.store.List(context.Background())
				if err != nil || len(migs) != 1 {
					return errText("no migration")
				}
				m = migs[0]
				return nil
			})
			m.Status = kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationFailed, Reason: "LocalVolume",
				Message: "pod default/vm1 cannot move: volume disk is a hostPath (/var/lib/vm1)"}
			if _, err := r.store.UpdateStatus(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the report", func() error {
				evs, _ := r.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
				kinds := map[string]bool{}
				for _, e := range evs.Items {
					if strings.Contains(e.Message, "hostPath (/var/lib/vm1)") {
						kinds[e.InvolvedObject.Kind] = true
					}
				}
				if !kinds["Pod"] || !kinds["Node"] {
					return errText("events on pod and node missing")
				}
				for _, c := range r.pod(t, "vm1").Status.Conditions {
					if c.Type == ConditionLiveMigratable && c.Status == corev1.ConditionFalse && c.Reason == "LocalVolume" {
						return nil
					}
				}
				return errText("no LiveMigratable=False condition")
			})
			label := r.pod(t, "vm1").Labels[kubeapi.LabelEvictionPDB]
			if strategy == kubeapi.EvictionLiveMigrate && label != "crimux-vm-vm1" {
				t.Errorf("a live-migrate VM that cannot move was let go: label %q", label)
			}
			if strategy == kubeapi.EvictionLiveMigrateOrShutdown {
				eventually(t, "let go", func() error {
					if l := r.pod(t, "vm1").Labels[kubeapi.LabelEvictionPDB]; l != "" {
						return errText("still labelled " + l)
					}
					if b, _ := r.client.PolicyV1().PodDisruptionBudgets(ns).List(context.Background(), metav1.ListOptions{}); len(b.Items) != 0 {
						return errText("its budget is still there")
					}
					return nil
				})
			}
		})
	}
}
