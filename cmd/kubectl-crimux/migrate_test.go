package main

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/kubeapi"
)

// migCluster is a fake cluster for migrate: pods in a fake clientset,
// the VMMigration objects in a fake dynamic client.
type migCluster struct {
	kube  *fake.Clientset
	dyn   *dynamicfake.FakeDynamicClient
	store vmmigration.Store
	// gap is the fake controller's wait between two statuses.
	gap time.Duration
	// got is the options the plugin's last clientFunc call had.
	mu  sync.Mutex
	got options
}

// newMigCluster holds pods, and migs as they are.
func newMigCluster(t *testing.T, pods []*corev1.Pod, migs ...*kubeapi.VMMigration) *migCluster {
	t.Helper()
	var objs []runtime.Object
	for _, m := range migs {
		u, err := vmmigration.ToUnstructured(m)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	var kobjs []runtime.Object
	for _, p := range pods {
		kobjs = append(kobjs, p)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{vmmigration.GVR: "VMMigrationList"}, objs...)
	return &migCluster{kube: fake.NewClientset(kobjs...), dyn: dyn, store: vmmigration.Store{Client: dyn}, gap: 20 * time.Millisecond}
}

// client is the plugin's clientFunc: the namespace is -n's, else testNS.
func (c *migCluster) client(o options) (clients, string, error) {
	c.mu.Lock()
	c.got = o
	c.mu.Unlock()
	ns := o.namespace
	if ns == "" {
		ns = testNS
	}
	return clients{kube: c.kube, dyn: c.dyn}, ns, nil
}

func (c *migCluster) run(ctx context.Context, args ...string) (int, string, string) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := run(ctx, args, out, errOut, c.client)
	return code, out.String(), errOut.String()
}

// step is one status the fake controller writes; with onCancel, it waits
// for spec.cancel first.
type step struct {
	status   kubeapi.VMMigrationStatus
	onCancel bool
}

// controller plays crimux's controller until the test ends: it takes
// each migration it finds with no status yet, or with spec.cancel, through
// script(m)'s statuses, gap apart, written with Store.UpdateStatus onto
// the latest version (which keeps its spec). It starts once the plugin
// watches the migration, so that the plugin sees each status, however
// slowly it runs.
func (c *migCluster) controller(t *testing.T, script func(m *kubeapi.VMMigration) []step) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		taken := map[string]bool{}
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			migs, _, err := c.store.List(ctx)
			if err != nil {
				continue
			}
			for _, m := range migs {
				key := m.Namespace + "/" + m.Name
				if taken[key] || kubeapi.Final(m.Status.Phase) || m.Status.Phase != "" && !m.Spec.Cancel {
					continue
				}
				taken[key] = true
				c.play(ctx, t, m, script(m))
			}
		}
	}()
}

func (c *migCluster) play(ctx context.Context, t *testing.T, m *kubeapi.VMMigration, steps []step) {
	for ctx.Err() == nil && !c.watched(m.Name) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range steps {
		for {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(c.gap)
			cur, err := c.store.Get(ctx, m.Namespace, m.Name)
			if err != nil || s.onCancel && !cur.Spec.Cancel {
				continue
			}
			cur.Status = s.status
			if _, err := c.store.UpdateStatus(ctx, cur); err != nil {
				t.Errorf("fake controller: %v", err)
			}
			break
		}
	}
}

// watched reports whether the plugin watched migration name.
func (c *migCluster) watched(name string) bool {
	for _, a := range c.dyn.Actions() {
		if w, ok := a.(k8stesting.WatchAction); ok && w.GetResource() == vmmigration.GVR &&
			w.GetWatchRestrictions().Fields.String() == "metadata.name="+name {
			return true
		}
	}
	return false
}

// get is migration ns/name.
func (c *migCluster) get(t *testing.T, ns, name string) *kubeapi.VMMigration {
	t.Helper()
	m, err := c.store.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var createdLine = regexp.MustCompile(`^created VMMigration ([a-z0-9-]+)/(vm1-[a-z0-9]{5}) of pod vm1\n`)

// created is the namespace and name of the migration out says was
// created.
func created(t *testing.T, out string) (string, string) {
	t.Helper()
	sm := createdLine.FindStringSubmatch(out)
	if sm == nil {
		t.Fatalf("stdout does not start with the migration created:\n%s", out)
	}
	return sm[1], sm[2]
}

var (
	prog1 = kubeapi.MigrationProgress{Token: "tok", ElapsedMS: 1000, TotalBytes: 512 << 20, ProcessedBytes: 212 << 20, RemainingBytes: 300 << 20, DirtyRateBytes: 3 << 20, Iteration: 1}
	prog2 = kubeapi.MigrationProgress{Token: "tok", ElapsedMS: 2500, TotalBytes: 512 << 20, ProcessedBytes: 520 << 20, RemainingBytes: 20 << 20, DirtyRateBytes: 1 << 20, Iteration: 2}
)

// successScript is a migration of vm1 to node2 as the controller records
// it.
func successScript(*kubeapi.VMMigration) []step {
	st := kubeapi.VMMigrationStatus{SourceNode: "node1", TargetPod: "vm1-mig-abcde", TargetNode: "node2"}
	at := func(phase, msg string, p *kubeapi.MigrationProgress) step {
		s := st
		s.Phase, s.Reason, s.Message, s.Progress = phase, phase, msg, p
		return step{status: s}
	}
	done := at(kubeapi.VMMigrationSucceeded, "moved in 1.0s: downtime 80 ms; addresses 10.88.78.5", &prog2)
	done.status.Reason, done.status.DowntimeMS = "Moved", 80
	return []step{
		at(kubeapi.VMMigrationScheduling, "target pod vm1-mig-abcde created on node2", nil),
		at(kubeapi.VMMigrationTargetReady, "target pod vm1-mig-abcde ready to receive it at 10.0.0.2", nil),
		at(kubeapi.VMMigrationRunning, "target pod vm1-mig-abcde ready to receive it at 10.0.0.2", &prog1),
		at(kubeapi.VMMigrationRunning, "the VM left vm1; waiting for vm1-mig-abcde to take it over", &prog2),
		done,
	}
}

// TestMigrate: migrate creates a VMMigration of the pod (to --to's node)
// and prints each step the controller records, each progress report
// once, then where the VM runs.
func TestMigrate(t *testing.T) {
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm1", "node1")})
	c.controller(t, successScript)
	code, out, errOut := c.run(context.Background(), "migrate", "vm1", "--to", "node2")
	ns, name := created(t, out)
	want := "created VMMigration default/" + name + " of pod vm1\n" +
		"Scheduling: target pod vm1-mig-abcde created on node2\n" +
		"TargetReady: target pod vm1-mig-abcde ready to receive it at 10.0.0.2\n" +
		progressLine(prog1) + "\n" +
		progressLine(prog2) + "\n" +
		"Running: the VM left vm1; waiting for vm1-mig-abcde to take it over\n" +
		"Succeeded: moved in 1.0s: downtime 80 ms; addresses 10.88.78.5\n" +
		"target pod vm1-mig-abcde runs the VM on node2\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("migrate vm1 --to node2: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	m := c.get(t, ns, name)
	if ns != testNS || m.Spec != (kubeapi.VMMigrationSpec{Pod: "vm1", TargetNode: "node2"}) {
		t.Errorf("created %s/%s with spec %+v; want %s, pod vm1 to node2", ns, name, m.Spec, testNS)
	}
}

// TestMigrateRewatch: a watch that fails (its version expired) or ends
// is started again from a new list: the plugin misses no step and prints
// none twice.
func TestMigrateRewatch(t *testing.T) {
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm1", "node1")})
	c.gap = 50 * time.Millisecond
	var mu sync.Mutex
	calls := 0
	c.dyn.PrependWatchReactor(kubeapi.VMMigrationResource, func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch {
		case n == 1: // the version expired
			w := watch.NewRaceFreeFake()
			w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
			return true, w, nil
		case n <= 4: // one event, then the watch ends (as the API server's do)
			wa := a.(k8stesting.WatchActionImpl)
			real, err := c.dyn.Tracker().Watch(vmmigration.GVR, wa.GetNamespace(), metav1.ListOptions{ResourceVersion: wa.WatchRestrictions.ResourceVersion})
			if err != nil {
				return true, nil, err
			}
			ch := make(chan watch.Event)
			pw := watch.NewProxyWatcher(ch)
			go func() {
				defer close(ch)
				defer real.Stop()
				select {
				case ev, ok := <-real.ResultChan():
					if ok {
						select {
						case ch <- ev:
						case <-pw.StopChan():
						}
					}
				case <-pw.StopChan():
				}
			}()
			return true, pw, nil
		}
		return false, nil, nil
	})
	c.controller(t, successScript)
	code, out, errOut := c.run(context.Background(), "migrate", "vm1", "--to", "node2")
	_, name := created(t, out)
	want := "created VMMigration default/" + name + " of pod vm1\n" +
		"Scheduling: target pod vm1-mig-abcde created on node2\n" +
		"TargetReady: target pod vm1-mig-abcde ready to receive it at 10.0.0.2\n" +
		progressLine(prog1) + "\n" +
		progressLine(prog2) + "\n" +
		"Running: the VM left vm1; waiting for vm1-mig-abcde to take it over\n" +
		"Succeeded: moved in 1.0s: downtime 80 ms; addresses 10.88.78.5\n" +
		"target pod vm1-mig-abcde runs the VM on node2\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 5 {
		t.Errorf("%d watches; want the plugin to watch again after each ended", calls)
	}
}

// TestMigrateFails: without --to the node is the scheduler's (no
// spec.targetNode); a failed migration is exit 1, with its reason and
// message on stderr.
func TestMigrateFails(t *testing.T) {
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm1", "node1")})
	const why = "the target's node agent refused: no room for the VM; deleted target pod vm1-mig-abcde; the VM still runs in pod vm1 on node1, unchanged"
	c.controller(t, func(*kubeapi.VMMigration) []step {
		return []step{
			{status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationScheduling, TargetPod: "vm1-mig-abcde",
				Message: "target pod vm1-mig-abcde created (the scheduler chooses its node)"}},
			{status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationFailed, TargetPod: "vm1-mig-abcde", Reason: "TargetFailed", Message: why}},
		}
	})
	code, out, errOut := c.run(context.Background(), "migrate", "vm1")
	ns, name := created(t, out)
	if code != 1 || !strings.HasSuffix(out, "\nScheduling: target pod vm1-mig-abcde created (the scheduler chooses its node)\n") ||
		errOut != "kubectl-crimux: migration default/"+name+" failed (TargetFailed): "+why+"\n" {
		t.Errorf("a failed migration: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if m := c.get(t, ns, name); m.Spec != (kubeapi.VMMigrationSpec{Pod: "vm1"}) {
		t.Errorf("spec %+v; want pod vm1, no target node", m.Spec)
	}
}

// TestMigrateTimeout: with no controller the plugin asks whether it runs;
// at --timeout it stops following, says the migration goes
// on and how to follow and cancel it; the migration is left as it is.
func TestMigrateTimeout(t *testing.T) {
	defer func(d time.Duration) { controllerHintAfter = d }(controllerHintAfter)
	controllerHintAfter = 50 * time.Millisecond
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm1", "node1")})
	start := time.Now()
	code, out, errOut := c.run(context.Background(), "migrate", "vm1", "--timeout", "300ms")
	ns, name := created(t, out)
	for _, want := range []string{
		"kubectl-crimux: stopped following after --timeout 300ms: migration default/" + name + " of pod vm1 is Pending; it goes on in the cluster",
		"follow it: kubectl get vmmigration -n default " + name + " -w\n",
		"cancel it: kubectl crimux migrate vm1 --cancel -n default\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q; want %q", errOut, want)
		}
	}
	if code != 1 || !strings.Contains(out, "has no status after 50ms: is crimux's controller (crimux-controller) running?") ||
		time.Since(start) > 5*time.Second {
		t.Errorf("timeout: exit %d after %v, stdout %q", code, time.Since(start), out)
	}
	if m := c.get(t, ns, name); m.Spec.Cancel || m.Spec.Pod != "vm1" {
		t.Errorf("the migration after the timeout: %+v", m.Spec)
	}

}

// TestMigrateInterrupted: a signal (the context run gets ends) stops the
// following as --timeout does, saying it was interrupted.
func TestMigrateInterrupted(t *testing.T) {
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm1", "node1")})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	code, out, errOut := c.run(ctx, "migrate", "vm1", "--to", "node2")
	_, name := created(t, out)
	if code != 1 || !strings.HasPrefix(errOut, "kubectl-crimux: interrupted: migration default/"+name+" of pod vm1 is Pending; it goes on") ||
		!strings.Contains(errOut, "kubectl crimux migrate vm1 --cancel -n default\n") {
		t.Errorf("interrupted: exit %d, stderr %q", code, errOut)
	}
}

// TestRunMigrate: migrate's flags reach the migration and the client:
// --to, -n, --context, --timeout (here 300ms, no controller answering),
// and the hints name the context.
func TestRunMigrate(t *testing.T) {
	pod := vmPod("vm1", "node1", func(p *corev1.Pod) { p.Namespace = "ns1" })
	c := newMigCluster(t, []*corev1.Pod{pod})
	code, out, errOut := c.run(context.Background(), "migrate", "--context", "prod", "vm1", "-n", "ns1", "--to", "node2", "--timeout", "300ms")
	ns, name := created(t, out)
	c.mu.Lock()
	got := c.got
	c.mu.Unlock()
	if got.context != "prod" || got.namespace != "ns1" || got.to != "node2" || got.timeout != 300*time.Millisecond || !got.timeoutSet {
		t.Errorf("options %+v", got)
	}
	if m := c.get(t, "ns1", name); ns != "ns1" || m.Spec.Pod != "vm1" || m.Spec.TargetNode != "node2" {
		t.Errorf("created %s/%s: %+v", ns, name, m.Spec)
	}
	if code != 1 || !strings.Contains(errOut, "--timeout 300ms") ||
		!strings.Contains(errOut, "follow it: kubectl get vmmigration -n ns1 "+name+" -w --context prod\n") ||
		!strings.Contains(errOut, "cancel it: kubectl crimux migrate vm1 --cancel -n ns1 --context prod\n") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestMigrateRefused: a pod that is not there, or whose migration is
// under way already, gets no migration.
func TestMigrateRefused(t *testing.T) {
	under := &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: "vm2-aaaaa", Namespace: testNS},
		Spec: kubeapi.VMMigrationSpec{Pod: "vm2"}, Status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationRunning}}
	c := newMigCluster(t, []*corev1.Pod{vmPod("vm2", "node1")}, under)
	if code, out, errOut := c.run(context.Background(), "migrate", "nope"); code != 1 || out != "" || !strings.Contains(errOut, `pod default/nope: pods "nope" not found`) {
		t.Errorf("a missing pod: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut := c.run(context.Background(), "migrate", "vm2")
	if code != 1 || out != "" || !strings.Contains(errOut, "migration default/vm2-aaaaa of pod vm2 is under way already (Running): follow it: kubectl get vmmigration -n default vm2-aaaaa -w") {
		t.Errorf("a migration under way: exit %d, %q %q", code, out, errOut)
	}
	if migs, _, _ := c.store.List(context.Background()); len(migs) != 1 {
		t.Errorf("%d migrations; want the one there was", len(migs))
	}
}

// TestMigrateCancel: --cancel sets spec.cancel on the pod's migration
// under way (not on one that ended, another pod's, or another
// namespace's) and follows it to its end.
func TestMigrateCancel(t *testing.T) {
	mig := func(ns, name, pod, phase string) *kubeapi.VMMigration {
		return &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kubeapi.VMMigrationSpec{Pod: pod}, Status: kubeapi.VMMigrationStatus{Phase: phase, Message: "the VM is on its way", TargetPod: pod + "-mig-abcde"}}
	}
	c := newMigCluster(t, nil,
		mig(testNS, "vm1-aaaaa", "vm1", kubeapi.VMMigrationRunning),
		mig(testNS, "vm1-old00", "vm1", kubeapi.VMMigrationSucceeded),
		mig(testNS, "vm2-bbbbb", "vm2", kubeapi.VMMigrationRunning),
		mig("other", "vm1-ccccc", "vm1", kubeapi.VMMigrationRunning))
	const why = "cancelled (spec.cancel); deleted target pod vm1-mig-abcde; the VM still runs in pod vm1 on node1, unchanged"
	c.controller(t, func(m *kubeapi.VMMigration) []step {
		return []step{
			{status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationFailed, Reason: "Cancelled", Message: why}, onCancel: true},
		}
	})
	code, out, errOut := c.run(context.Background(), "migrate", "vm1", "--cancel")
	want := "cancelling VMMigration default/vm1-aaaaa of pod vm1 (Running)\n" +
		"Running: the VM is on its way\n" +
		"migration default/vm1-aaaaa cancelled: " + why + "\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("migrate vm1 --cancel: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	for _, m := range []struct {
		ns, name string
		cancel   bool
	}{{testNS, "vm1-aaaaa", true}, {testNS, "vm1-old00", false}, {testNS, "vm2-bbbbb", false}, {"other", "vm1-ccccc", false}} {
		if got := c.get(t, m.ns, m.name).Spec.Cancel; got != m.cancel {
			t.Errorf("%s/%s: spec.cancel %v, want %v", m.ns, m.name, got, m.cancel)
		}
	}

	// Nothing under way any more.
	code, out, errOut = c.run(context.Background(), "migrate", "vm1", "--cancel")
	if code != 1 || out != "" || errOut != "kubectl-crimux: no migration of pod default/vm1 is under way\n" {
		t.Errorf("nothing to cancel: exit %d, %q %q", code, out, errOut)
	}
}

// TestMigrateCancelTooLate: a migration whose VM had left the source
// succeeds though cancelled: that is no failure.
func TestMigrateCancelTooLate(t *testing.T) {
	c := newMigCluster(t, nil, &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: "vm1-aaaaa", Namespace: testNS},
		Spec: kubeapi.VMMigrationSpec{Pod: "vm1"}, Status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationRunning}})
	c.controller(t, func(*kubeapi.VMMigration) []step {
		return []step{{onCancel: true, status: kubeapi.VMMigrationStatus{Phase: kubeapi.VMMigrationSucceeded, Reason: "Moved",
			TargetPod: "vm1-mig-abcde", TargetNode: "node2", Message: "moved in 1.0s: downtime 80 ms; addresses 10.88.78.5"}}}
	})
	code, out, errOut := c.run(context.Background(), "migrate", "vm1", "--cancel")
	want := "cancelling VMMigration default/vm1-aaaaa of pod vm1 (Running)\n" +
		"Succeeded: moved in 1.0s: downtime 80 ms; addresses 10.88.78.5\n" +
		"migration default/vm1-aaaaa succeeded before it could be cancelled (the VM had left pod vm1)\n" +
		"target pod vm1-mig-abcde runs the VM on node2\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
}

func TestMigrationName(t *testing.T) {
	if n := migrationName("vm1"); !regexp.MustCompile(`^vm1-[a-z0-9]{5}$`).MatchString(n) {
		t.Errorf("migrationName(vm1) = %q", n)
	}
	long := strings.Repeat("a", 100)
	if n := migrationName(long); len(n) != 63 || !strings.HasPrefix(n, strings.Repeat("a", 58)) {
		t.Errorf("migrationName of a long name: %q (%d characters)", n, len(n))
	}
}

func TestProgressLine(t *testing.T) {
	p := kubeapi.MigrationProgress{ElapsedMS: 5200, TotalBytes: 1000 << 20, RemainingBytes: 120 << 20, DirtyRateBytes: 3250586, Iteration: 2}
	if got, want := progressLine(p), "  88%  remaining 120.0 MiB  dirty 3.1 MiB/s  pass 2  (5.2s)"; got != want {
		t.Errorf("progressLine = %q, want %q", got, want)
	}
	if got := progressLine(kubeapi.MigrationProgress{RemainingBytes: 5}); !strings.HasPrefix(got, "   0%") {
		t.Errorf("no total: %q", got)
	}
	if got := progressLine(kubeapi.MigrationProgress{TotalBytes: 10, RemainingBytes: 50}); !strings.HasPrefix(got, "   0%") {
		t.Errorf("more remaining than the total: %q", got)
	}
}
