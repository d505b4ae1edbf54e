package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
			t.Fatalf("output lacks %q (in order):\n%s", w, text)
		}
		rest = rest[i+len(w):]
	}
}

// Happy path: each answer relayed in the protocol's order, the progress
// printed, S deleted once T's finish says Succeeded; an earlier attempt's
// leftovers on S cleared, and its late answers ignored.
func TestMigrate(t *testing.T) {
	old := func(p *corev1.Pod) {
		p.Annotations[kubeapi.AnnotationMigrateTo] = "vm1-mig-old00" // gone
		p.Annotations[kubeapi.AnnotationMigrationResult] = `{"phase":"Failed","message":"an old refusal"}`
		p.Annotations[kubeapi.AnnotationMigrationFinish] = `{"token":"tok-old","phase":"Failed"}`
	}
	c := newFakeCluster(t, behaviour{staleFirst: true}, vmPod("vm1", "node1", old))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	t.Logf("stdout:\n%s", out)
	inOrder(t, out.String(),
		"migrating pod default/vm1 from node1 to node2\n",
		"created target pod vm1-mig-abcde on node2\n",
		"  41%  remaining 300.0 MiB  dirty 3.0 MiB/s  pass 1  (1.0s)\n",
		"  96%  remaining 20.0 MiB  dirty 1.0 MiB/s  pass 2  (2.5s)\n",
		"the VM left vm1; waiting for vm1-mig-abcde to take it over\n",
		"moved in ", "s: downtime 80 ms; addresses 10.88.78.5\n",
		"deleted source pod vm1\n")
	for _, w := range []string{
		"target pod vm1-mig-abcde running on node2\n",
		"source pod vm1 ready to send its VM (image sha256:0123456789ab)\n",
		"target pod vm1-mig-abcde ready to receive it at 10.0.0.2 (libvirt qemu+tls://10.0.0.2/system)\n",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if strings.Contains(out.String(), "512.0 MiB") || errOut.String() != "" {
		t.Errorf("the earlier attempt's progress printed, or errors:\n%s\n%s", out, errOut)
	}
	if getPod(t, c.client, "vm1") != nil {
		t.Error("the source pod is still there")
	}
	tp := getPod(t, c.client, target)
	if tp == nil || tp.Annotations[kubeapi.AnnotationMigrationFinish] == "" {
		t.Fatalf("the target pod is gone or has no finish: %+v", tp)
	}
	var src kubeapi.MigrationSource
	if _, err := kubeapi.DecodeAnnotation(tp.Annotations, kubeapi.AnnotationMigrationSource, &src); err != nil || src.Target != target {
		t.Errorf("T's migration-source is %+v (%v): the earlier attempt's relayed?", src, err)
	}

	// Each step after the one it answers, whoever wrote it.
	seq := patched(c.client)
	order := []string{
		"vm1 " + kubeapi.AnnotationMigrateTo,
		"vm1 " + kubeapi.AnnotationMigrationSource,
		target + " " + kubeapi.AnnotationMigrationSource,
		target + " " + kubeapi.AnnotationMigrationTarget,
		"vm1 " + kubeapi.AnnotationMigrationTarget,
		"vm1 " + kubeapi.AnnotationMigrationProgress,
		"vm1 " + kubeapi.AnnotationMigrationResult,
		target + " " + kubeapi.AnnotationMigrationResult,
		target + " " + kubeapi.AnnotationMigrationFinish,
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
	c := newFakeCluster(t, behaviour{targetRefuses: "the source VM has 2 vCPUs, the target pod 4"}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	err := m.run(context.Background())
	if !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(),
		"kubectl-crimux: migration of pod default/vm1 to node2 failed: the target refused: the source VM has 2 vCPUs, the target pod 4\n",
		"deleted target pod vm1-mig-abcde\n",
		"removed the migration annotations of pod vm1\n",
		"the VM still runs in pod default/vm1 on node1, unchanged\n")
	requireCleanedUp(t, c)
}

// S's Migrate fails: its result goes to T all the same (T's agent ends
// its wait), then T goes.
func TestMigrateSourceFails(t *testing.T) {
	c := newFakeCluster(t, behaviour{sourceFails: "migration job: unexpectedly failed"}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: the source could not send the VM: migration job: unexpectedly failed\n",
		"deleted target pod", "the VM still runs in pod default/vm1 on node1, unchanged\n")
	if !slices.Contains(patched(c.client), target+" "+kubeapi.AnnotationMigrationResult) {
		t.Error("S's failed result was not copied to T")
	}
	requireCleanedUp(t, c)
}

// kubelet refuses T: its reason is told.
func TestMigrateTargetPodFails(t *testing.T) {
	c := newFakeCluster(t, behaviour{targetFails: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: target pod vm1-mig-abcde is Failed: NodeAffinity: Pod was rejected: Predicate NodeAffinity failed\n",
		"the VM still runs")
	requireCleanedUp(t, c)
}

// Nobody answers: the timeout ends it, cleanly.
func TestMigrateTimeout(t *testing.T) {
	c := newFakeCluster(t, behaviour{noAgents: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 500*time.Millisecond)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: timed out after 500ms (--timeout)\n", "the VM still runs")
	if !strings.Contains(out.String(), "still waiting for node1's node agent to answer for pod vm1: is crimux's node agent on there") {
		t.Error("no hint of the agent waited for")
	}
	requireCleanedUp(t, c)
}

// A signal (ctx ends) once T runs: cleaned up as any failure.
func TestMigrateInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newFakeCluster(t, behaviour{noAgents: true, onTargetRun: cancel}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(ctx); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: interrupted\n", "deleted target pod", "the VM still runs")
	requireCleanedUp(t, c)
}

// The VM left S but T's agent says it did not arrive: T goes (its
// agent's word is the last), and nobody is told the VM runs on S.
func TestMigrateFinishFails(t *testing.T) {
	c := newFakeCluster(t, behaviour{finishFails: "FinishMigration: the VM has not arrived"}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: the target could not take the VM: FinishMigration: the VM has not arrived\n",
		"deleted target pod vm1-mig-abcde\n",
		"the VM left pod default/vm1 (its node agent said it was sent) but did not arrive in pod vm1-mig-abcde: it runs in neither")
	if strings.Contains(errOut.String(), "still runs") {
		t.Error("said the VM still runs on the source")
	}
	requireCleanedUp(t, c)
}

// The VM left S and T's agent does not finish: the VM may run in T, so
// both pods are kept.
func TestMigrateNoFinishAfterTheVMLeft(t *testing.T) {
	c := newFakeCluster(t, behaviour{noFinish: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: timed out after 1s (--timeout)\n",
		"the VM left pod vm1: it was sent to pod vm1-mig-abcde, whose node agent has not said whether it arrived; both pods are kept")
	if strings.Contains(errOut.String(), "still runs") || strings.Contains(errOut.String(), "deleted") {
		t.Error("said the VM still runs on the source, or deleted a pod")
	}
	if getPod(t, c.client, target) == nil || getPod(t, c.client, "vm1") == nil {
		t.Error("a pod was deleted")
	}
}

// T's agent says the VM arrived while S's has not said it left (a
// compromised target node, or one that lies): S is on another node, and
// T's word alone never deletes it. Both pods are kept for a person.
func TestMigrateTargetsWordAloneDeletesNoSource(t *testing.T) {
	c := newFakeCluster(t, behaviour{forgedFinish: true, sourceSilent: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure\n%s\n%s", err, out, errOut)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if getPod(t, c.client, "vm1") == nil {
		t.Fatal("the source pod was deleted on the target's word alone")
	}
	if getPod(t, c.client, target) == nil {
		t.Error("the target pod was deleted: its node says the VM runs there")
	}
	if strings.Contains(out.String(), "moved in") {
		t.Error("said the VM moved on the target's word alone")
	}
	inOrder(t, errOut.String(), "pod vm1-mig-abcde's node agent says the VM arrived, but pod default/vm1's (on node1) has not said it left; both pods are kept")
}

// S's Migrate failed, but T's agent finds the VM arrived (it switched
// over as the source failed): S's node did not say the VM left, so S is
// kept, and the user is told how to finish by hand.
func TestMigrateSourceFailedYetArrived(t *testing.T) {
	c := newFakeCluster(t, behaviour{sourceFails: "job cancelled", arrivedAnyway: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure\n%s\n%s", err, out, errOut)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "note from pod vm1-mig-abcde's node agent: the source reported the migration failed, but the VM arrived here\n",
		"pod vm1-mig-abcde's node agent says the VM arrived, but pod default/vm1's (on node1) said: job cancelled; both pods are kept",
		"kubectl delete pod -n default vm1")
	if getPod(t, c.client, "vm1") == nil || getPod(t, c.client, target) == nil {
		t.Error("a pod was deleted")
	}
}

// S's Migrate failed and T's agent does not finish: T goes after a
// while.
func TestMigrateSourceFailedNoFinish(t *testing.T) {
	c := newFakeCluster(t, behaviour{sourceFails: "job cancelled", noFinish: true}, vmPod("vm1", "node1"))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	m.finishWait = 300 * time.Millisecond
	if err := m.run(context.Background()); !errors.Is(err, errReported) {
		t.Fatalf("run: %v, want a failure", err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	inOrder(t, errOut.String(), "failed: the source could not send the VM: job cancelled; then the target's node agent did not finish within 300ms\n",
		"deleted target pod", "the VM still runs in pod default/vm1 on node1, unchanged\n")
	requireCleanedUp(t, c)
}

// A pod that arrived by migration (its finish Succeeded) moves on like
// any other: its own migration's annotations are not T's, and go from it.
func TestMigrateArrivedPodMovesOn(t *testing.T) {
	c := newFakeCluster(t, behaviour{}, vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.Annotations[kubeapi.AnnotationMigrateFrom] = "default/vm0"
		p.Annotations[kubeapi.AnnotationMigrationSource] = `{"target":"vm1"}`
		p.Annotations[kubeapi.AnnotationMigrationTarget] = `{"source":"default/vm0","token":"t0"}`
		p.Annotations[kubeapi.AnnotationMigrationResult] = `{"token":"t0","phase":"Succeeded"}`
		p.Annotations[kubeapi.AnnotationMigrationFinish] = `{"token":"t0","phase":"Succeeded","downtimeMs":70}`
	}))
	m, out, errOut := testMigration(c.client, "vm1", "node2", 10*time.Second)
	if err := m.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
	}
	tp := getPod(t, c.client, target)
	if tp == nil || tp.Annotations[kubeapi.AnnotationMigrateFrom] != "default/vm1" {
		t.Fatalf("target pod %+v", tp)
	}
	var fin kubeapi.MigrationFinish
	if _, err := kubeapi.DecodeAnnotation(tp.Annotations, kubeapi.AnnotationMigrationFinish, &fin); err != nil || fin.Token != "tok-"+target {
		t.Errorf("T's finish %+v (%v): vm1's own copied?", fin, err)
	}
}

// requireCleanedUp: T gone, S without migrate-to, and every migration
// annotation removed from S (its agent may answer later all the same).
func requireCleanedUp(t *testing.T, c *fakeCluster) {
	t.Helper()
	if getPod(t, c.client, target) != nil {
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t, behaviour{noAgents: true}, append(tc.more, tc.pod)...)
			m, _, _ := testMigration(c.client, "vm1", tc.node, time.Second)
			err := m.run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v, want an error saying %q", err, tc.want)
			}
			for _, a := range c.client.Actions() {
				if a.GetVerb() == "create" || a.GetVerb() == "patch" {
					t.Errorf("%s %s before refusing", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// The command line, through run: a fake client, a random name; a pod a
// controller manages is warned of.
func TestRunMigrate(t *testing.T) {
	yes := true
	c := newFakeCluster(t, behaviour{}, vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs1", Controller: &yes}}
	}))
	var got options
	client := func(o options) (kubernetes.Interface, string, error) {
		got = o
		return c.client, testNS, nil
	}
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := run(context.Background(), []string{"migrate", "vm1", "--to", "node2", "-n", "default", "--context", "kind", "--timeout=30s"}, out, errOut, client)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if got.to != "node2" || got.namespace != "default" || got.context != "kind" || got.timeout != 30*time.Second {
		t.Errorf("options %+v", got)
	}
	if !regexp.MustCompile(`(?m)^created target pod vm1-mig-[a-z0-9]{5} on node2$`).MatchString(out.String()) {
		t.Errorf("output:\n%s", out)
	}
	if want := "warning: pod default/vm1 is managed by ReplicaSet rs1; its target pod will not be, though it has the same labels\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}
