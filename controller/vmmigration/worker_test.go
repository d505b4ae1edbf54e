package vmmigration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/crimux/crimux/kubeapi"
)

const target = "vm1-mig-abcde"

func getPod(t *testing.T, c *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// inOrder fails unless want's lines appear in text in that order.
func inOrder(t *testing.T, text string, want ...string) {
	t.Helper()
	rest := text
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%q missing (in order) from:\n%s", w, text)
		}
		rest = rest[i+len(w):]
	}
}

// Happy path: each answer relayed in the protocol's order, the progress
// in the status, S deleted once T's finish says Succeeded; an earlier
// attempt's leftovers on S cleared, and its late answers ignored.
func TestMigrate(t *testing.T) {
	old := func(p *corev1.Pod) {
		p.Annotations[kubeapi.AnnotationMigrateTo] = "vm1-mig-old00" // gone
		p.Annotations[kubeapi.AnnotationMigrationResult] = `{"phase":"Failed","message":"an old refusal"}`
		p.Annotations[kubeapi.AnnotationMigrationFinish] = `{"token":"tok-old","phase":"Failed"}`
	}
	r := newRig(t, behaviour{staleFirst: true}, 10*time.Second, vmPod("vm1", "node1", old))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationSucceeded, "Migrated", "s: downtime 80 ms; addresses 10.88.78.5")
	st := m.Status
	if st.SourceNode != "node1" || st.TargetNode != "node2" || st.TargetPod != migTarget || st.DowntimeMS != 80 || !st.Moved ||
		st.Token != "tok-"+migTarget || st.Progress == nil || st.Progress.RemainingBytes != 20<<20 || st.EndTime == nil {
		t.Errorf("status %+v", st)
	}
	inOrder(t, r.story(t),
		"TargetCreated: target pod "+migTarget+" created on node2\n",
		"the VM left vm1; waiting for "+migTarget+" to take it over\n",
		"Pod vm1 Migrated: the VM moved to pod "+migTarget+" on node2\n",
		"VMMigration mig Migrated: moved in ")
	for _, w := range []string{
		"target pod " + migTarget + " running on node2\n",
		"source pod vm1 ready to send its VM (image sha256:0123456789ab)\n",
		"target pod " + migTarget + " ready to receive it at 10.0.0.2\n",
	} {
		if !strings.Contains(r.story(t), w) {
			t.Errorf("events lack %q", w)
		}
	}
	if getPod(t, r.client, "vm1") != nil {
		t.Error("the source pod is still there")
	}
	tp := getPod(t, r.client, migTarget)
	if tp == nil || tp.Annotations[kubeapi.AnnotationMigrationFinish] == "" || tp.Labels[kubeapi.LabelVMMigration] != "mig" {
		t.Fatalf("the target pod is gone, has no finish or no label: %+v", tp)
	}
	var src kubeapi.MigrationSource
	if _, err := kubeapi.DecodeAnnotation(tp.Annotations, kubeapi.AnnotationMigrationSource, &src); err != nil || src.Target != migTarget {
		t.Errorf("T's migration-source is %+v (%v): the earlier attempt's relayed?", src, err)
	}
	requireProtocolOrder(t, r.client)
	if n := promtest.ToFloat64(r.ctl.Metrics.results.WithLabelValues("Succeeded", "Migrated")); n != 1 {
		t.Errorf("crimux_controller_vmmigrations_ended_total{Succeeded,Migrated} = %v, want 1", n)
	}
	if n := promtest.CollectAndCount(r.ctl.Metrics.downtime); n != 1 {
		t.Errorf("downtime histogram has %d series, want 1", n)
	}
}

// requireProtocolOrder: each step after the one it answers, whoever
// wrote it.
func requireProtocolOrder(t *testing.T, c *fake.Clientset) {
	t.Helper()
	seq := patched(c)
	order := []string{
		"vm1 " + kubeapi.AnnotationMigrateTo,
		"vm1 " + kubeapi.AnnotationMigrationSource,
		migTarget + " " + kubeapi.AnnotationMigrationSource,
		migTarget + " " + kubeapi.AnnotationMigrationTarget,
		"vm1 " + kubeapi.AnnotationMigrationTarget,
		"vm1 " + kubeapi.AnnotationMigrationProgress,
		"vm1 " + kubeapi.AnnotationMigrationResult,
		migTarget + " " + kubeapi.AnnotationMigrationResult,
		migTarget + " " + kubeapi.AnnotationMigrationFinish,
	}
	last := -1
	for _, k := range order {
		i := slices.Index(seq, k)
		if i <= last {
			t.Fatalf("%s at %d, want after %d: %v", k, i, last, seq)
		}
		last = i
	}
}

// The target refuses: T deleted, S's migration annotations removed, the
// VM said to run on in S.
func TestMigrateTargetRefuses(t *testing.T) {
	r := newRig(t, behaviour{targetRefuses: "the source VM has 2 vCPUs, the target pod 4"}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "MigrationFailed",
		"the target refused: the source VM has 2 vCPUs, the target pod 4; deleted target pod "+migTarget,
		"the VM still runs in pod vm1 on node1, unchanged")
	requireCleanedUp(t, r.fakeCluster)
}

// S's Migrate fails: its result goes to T all the same (T's agent ends
// its wait), then T goes.
func TestMigrateSourceFails(t *testing.T) {
	r := newRig(t, behaviour{sourceFails: "migration job: unexpectedly failed"}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "TargetFailed",
		"the source could not send the VM: migration job: unexpectedly failed", "deleted target pod", "the VM still runs in pod vm1 on node1, unchanged")
	if !slices.Contains(patched(r.client), migTarget+" "+kubeapi.AnnotationMigrationResult) {
		t.Error("S's failed result was not copied to T")
	}
	requireCleanedUp(t, r.fakeCluster)
}

// kubelet refuses T: its reason is told.
func TestMigrateTargetPodFails(t *testing.T) {
	r := newRig(t, behaviour{targetFails: true}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "MigrationFailed",
		"target pod "+migTarget+" is Failed: NodeAffinity: Pod was rejected: Predicate NodeAffinity failed", "the VM still runs")
	requireCleanedUp(t, r.fakeCluster)
}

// Nobody answers: the migration's deadline ends it, cleanly, and the
// agent waited for is named meanwhile.
func TestMigrateTimeout(t *testing.T) {
	r := newRig(t, behaviour{noAgents: true}, 2*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "MigrationFailed", "timed out after 2s", "the VM still runs")
	if !strings.Contains(r.story(t), "AgentSilent: still waiting for node1's node agent to answer for pod vm1: is crimux's node agent on there") {
		t.Error("no hint of the agent waited for")
	}
	requireCleanedUp(t, r.fakeCluster)
}

// The user cancels once T runs: cleaned up as any failure.
func TestMigrateCancelled(t *testing.T) {
	var r *rig
	cancelled := make(chan struct{})
	r = newRig(t, behaviour{noAgents: true, onTargetRun: func() { close(cancelled) }}, 10*time.Second, vmPod("vm1", "node1"))
	r.ask(t, "mig", "vm1", "node2")
	<-cancelled
	setCancel(t, r, "mig")
	m := r.waitFinal(t, "mig")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "Cancelled", "cancelled (spec.cancel); deleted target pod", "the VM still runs")
	requireCleanedUp(t, r.fakeCluster)
}

// A migration cancelled before it started makes nothing.
func TestMigrateCancelledBeforeStart(t *testing.T) {
	r := newRig(t, behaviour{}, 10*time.Second, vmPod("vm1", "node1"))
	r.stop()
	r.ask(t, "mig", "vm1", "node2")
	setCancel(t, r, "mig")
	r.start(t)
	m := r.waitFinal(t, "mig")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "Cancelled", "before it started")
	if getPod(t, r.client, migTarget) != nil {
		t.Error("a target pod was made")
	}
}

func setCancel(t *testing.T, r *rig, name string) {
	t.Helper()
	u, err := r.store.Client.Resource(GVR).Namespace(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructuredSet(u.Object, true, "spec", "cancel"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Client.Resource(GVR).Namespace(testNS).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The VM left S but T's agent says it did not arrive: T goes (its
// agent's word is the last), and nobody is told the VM runs on S.
func TestMigrateFinishFails(t *testing.T) {
	r := newRig(t, behaviour{finishFails: "FinishMigration: the VM has not arrived"}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "TargetFailed", "the target could not take the VM: FinishMigration: the VM has not arrived",
		"deleted target pod "+migTarget,
		"the VM left pod vm1 (its node agent said it was sent) but did not arrive in pod "+migTarget+": it runs in neither")
	if strings.Contains(m.Status.Message, "still runs") {
		t.Error("said the VM still runs on the source")
	}
	requireCleanedUp(t, r.fakeCluster)
}

// The VM left S and T's agent does not finish: the VM may run in T, so
// both pods are kept.
func TestMigrateNoFinishAfterTheVMLeft(t *testing.T) {
	r := newRig(t, behaviour{noFinish: true}, 3*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "BothPodsKept", "timed out after 3s",
		"the VM left pod vm1: it was sent to pod "+migTarget+", whose node agent has not said whether it arrived; both pods are kept")
	if getPod(t, r.client, migTarget) == nil || getPod(t, r.client, "vm1") == nil {
		t.Error("a pod was deleted")
	}
}

// T's agent says the VM arrived while S's has not said it left (a
// compromised target node, or one that lies): S is on another node, and
// T's word alone never deletes it. Both pods are kept for a person.
func TestMigrateTargetsWordAloneDeletesNoSource(t *testing.T) {
	r := newRig(t, behaviour{forgedFinish: true, sourceSilent: true}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	if getPod(t, r.client, "vm1") == nil {
		t.Fatal("the source pod was deleted on the target's word alone")
	}
	if getPod(t, r.client, migTarget) == nil {
		t.Error("the target pod was deleted: its node says the VM runs there")
	}
	wantEnd(t, m, kubeapi.VMMigrationFailed, "BothPodsKept",
		"pod "+migTarget+"'s node agent says the VM arrived, but pod vm1's (on node1) has not said it left; both pods are kept")
}

// S's Migrate failed, but T's agent finds the VM arrived (it switched
// over as the source failed): S's node did not say the VM left, so S is
// kept, and the status says how to finish by hand.
func TestMigrateSourceFailedYetArrived(t *testing.T) {
	r := newRig(t, behaviour{sourceFails: "job cancelled", arrivedAnyway: true}, 10*time.Second, vmPod("vm1", "node1"))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "BothPodsKept",
		"pod "+migTarget+"'s node agent says the VM arrived, but pod vm1's (on node1) said: job cancelled; both pods are kept",
		"kubectl delete pod -n default vm1")
	if getPod(t, r.client, "vm1") == nil || getPod(t, r.client, migTarget) == nil {
		t.Error("a pod was deleted")
	}
}

// S's Migrate failed and T's agent does not finish: T goes after a
// while.
func TestMigrateSourceFailedNoFinish(t *testing.T) {
	r := newRig(t, behaviour{sourceFails: "job cancelled", noFinish: true}, 10*time.Second, vmPod("vm1", "node1"))
	r.stop()
	r.ctl.Timing.FinishWait = 300 * time.Millisecond
	r.start(t)
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationFailed, "SourceFailed",
		"the source could not send the VM: job cancelled; then the target's node agent did not finish within 300ms",
		"deleted target pod", "the VM still runs in pod vm1 on node1, unchanged")
	requireCleanedUp(t, r.fakeCluster)
}

// A pod that arrived by migration (its finish Succeeded) moves on like
// any other: its own migration's annotations are not T's, and go from it.
func TestMigrateArrivedPodMovesOn(t *testing.T) {
	r := newRig(t, behaviour{}, 10*time.Second, vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.Annotations[kubeapi.AnnotationMigrateFrom] = "default/vm0"
		p.Annotations[kubeapi.AnnotationMigrationSource] = `{"target":"vm1"}`
		p.Annotations[kubeapi.AnnotationMigrationTarget] = `{"source":"default/vm0","token":"t0"}`
		p.Annotations[kubeapi.AnnotationMigrationResult] = `{"token":"t0","phase":"Succeeded"}`
		p.Annotations[kubeapi.AnnotationMigrationFinish] = `{"token":"t0","phase":"Succeeded","downtimeMs":70}`
	}))
	m := r.migrate(t, "vm1", "node2")
	wantEnd(t, m, kubeapi.VMMigrationSucceeded, "Migrated")
	tp := getPod(t, r.client, migTarget)
	if tp == nil || tp.Annotations[kubeapi.AnnotationMigrateFrom] != "default/vm1" {
		t.Fatalf("target pod %+v", tp)
	}
	var fin kubeapi.MigrationFinish
	if _, err := kubeapi.DecodeAnnotation(tp.Annotations, kubeapi.AnnotationMigrationFinish, &fin); err != nil || fin.Token != "tok-"+migTarget {
		t.Errorf("T's finish %+v (%v): vm1's own copied?", fin, err)
	}
}

// requireCleanedUp: T gone, S without migrate-to, and every migration
// annotation removed from S (its agent may answer later all the same).
func requireCleanedUp(t *testing.T, c *fakeCluster) {
	t.Helper()
	if getPod(t, c.client, migTarget) != nil {
		t.Error("the target pod is still there")
	}
	s := getPod(t, c.client, "vm1")
	if s == nil {
		t.Fatal("the source pod is gone")
	}
	if to, ok := s.Annotations[kubeapi.AnnotationMigrateTo]; ok {
		t.Errorf("the source pod still has %s: %s", kubeapi.AnnotationMigrateTo, to)
	}
	for _, a := range c.client.Actions() {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok || pa.GetName() != "vm1" {
			continue
		}
		var p struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(pa.GetPatch(), &p)
		removed := 0
		for _, k := range append([]string{kubeapi.AnnotationMigrateTo}, kubeapi.MigrationAnnotations...) {
			if v, ok := p.Metadata.Annotations[k]; ok && v == nil {
				removed++
			}
		}
		if removed == 1+len(kubeapi.MigrationAnnotations) {
			return
		}
	}
	t.Error("no patch removed the source pod's migration annotations")
}

// Refused before anything is made.
func TestMigrateRefused(t *testing.T) {
	other := "default/vm0"
	cases := []struct {
		name, node string
		pod        *corev1.Pod
		more       []*corev1.Pod
		want       string
	}{
		{"already there", "node1", vmPod("vm1", "node1"), nil, "pod default/vm1 runs on node1 already"},
		{"not running", "node2", vmPod("vm1", "node1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), nil, "is Pending, not Running"},
		{"no node", "node2", vmPod("vm1", "", func(p *corev1.Pod) {}), nil, "is on no node"},
		{"a target", "node2", vmPod("vm1", "node1", func(p *corev1.Pod) { p.Annotations[kubeapi.AnnotationMigrateFrom] = other }), nil,
			"is itself a migration's target (crimux.io/migrate-from: default/vm0)"},
		{"no such node", "node9", vmPod("vm1", "node1"), nil, "node node9 not found"},
		{"node not ready", "node3", vmPod("vm1", "node1"), nil, "node node3 is not Ready (Ready=False: KubeletReady)"},
		{"no such pod", "node2", vmPod("vm2", "node1"), nil, "pod default/vm1 not found"},
		{"not a VM", "node2", vmPod("vm1", "node1", func(p *corev1.Pod) { p.Spec.RuntimeClassName = nil }), nil, "not a VM pod"},
		{"under way", "node2", vmPod("vm1", "node1", func(p *corev1.Pod) { p.Annotations[kubeapi.AnnotationMigrateTo] = "vm1-mig-zzzzz" }),
			[]*corev1.Pod{vmPod("vm1-mig-zzzzz", "node2", func(p *corev1.Pod) { p.Annotations[kubeapi.AnnotationMigrateFrom] = "default/vm1" })},
			"pod default/vm1 is being migrated already, to pod vm1-mig-zzzzz"},
		{"a hostPath", "node2", vmPod("vm1", "node1", withVolume(corev1.Volume{Name: "disk",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/vm1"}}})), nil,
			"pod default/vm1 cannot move: volume disk is a hostPath (/var/lib/vm1)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, behaviour{noAgents: true}, time.Second, append(tc.more, tc.pod)...)
			m := r.migrate(t, "vm1", tc.node)
			if m.Status.Phase != kubeapi.VMMigrationFailed || !strings.Contains(m.Status.Message, tc.want) {
				t.Fatalf("status %s %s, want Failed saying %q", m.Status.Phase, m.Status.Message, tc.want)
			}
			for _, a := range r.client.Actions() {
				if (a.GetVerb() == "create" || a.GetVerb() == "patch") && a.GetResource().Resource != "events" {
					t.Errorf("%s %s before refusing", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

func withVolume(v corev1.Volume) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, v) }
}
