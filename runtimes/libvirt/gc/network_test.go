package gc

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// TestCollectorFinishesAbandonedCreates: a pod still Creating after a
// restart (afterStart) loses its network and record; a fresh one in a
// periodic pass is left to its call.
func TestCollectorFinishesAbandonedCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, f := e.gc, e.Net
	e.PutPod(t, "crashed", func(sb *store.Sandbox) { sb.Creating = true })
	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if len(f.Teardowns) != 0 {
		t.Fatalf("a fresh Creating pod was torn down: %v", f.Teardowns)
	}
	r.collectNetworks(&rep, true, true)
	if _, err := r.Store.Sandbox("crashed"); !errdefs.IsNotFound(err) || len(f.Teardowns) != 1 {
		t.Fatalf("after start: record %v, teardowns %v", err, f.Teardowns)
	}
}

// TestCollectorNamespaces: this instance's namespaces without a record
// go (only once libvirt was asked: orphans); foreign ones are reported.
func TestCollectorNamespaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, f := e.gc, e.Net
	e.PutPod(t, "live", nil)
	f.Own = map[string]string{"live": "/x/i_live", "orphan": "/x/i_orphan"}
	f.Foreign = []string{"other_abc"}
	var rep GCReport
	r.collectNetworks(&rep, false, false)
	if len(f.Collected) != 0 {
		t.Fatalf("orphans collected without libvirt's word: %v", f.Collected)
	}
	r.collectNetworks(&rep, false, true)
	if len(f.Collected) != 1 || f.Collected[0] != "orphan" || rep.Networks != 1 || len(rep.ForeignNetns) != 1 {
		t.Fatalf("collected %v, report %+v", f.Collected, rep)
	}
}

// TestCollectorNamespacesNeedLibvirt: with libvirtd down a pass collects
// no orphan namespace (a VM adopted back later keeps its network), and
// still finishes the pods the store records as going.
func TestCollectorNamespacesNeedLibvirt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Net.Own = map[string]string{"orphan": "/x/i_orphan"}
	e.PutPod(t, "going", func(sb *store.Sandbox) { sb.Removing = true })
	e.Libvirt.SetDown(errors.New("libvirtd down"))
	rep := e.gc.CollectGarbage(context.Background(), false)
	if len(e.Net.Collected) != 0 {
		t.Fatalf("orphans collected with libvirtd down: %v", e.Net.Collected)
	}
	if _, err := e.R.Store.Sandbox("going"); !errdefs.IsNotFound(err) || rep.Networks != 1 {
		t.Fatalf("removing pod with libvirtd down: record %v, report %+v; want it finished", err, rep)
	}
	e.Libvirt.SetDown(nil)
	rep = e.gc.CollectGarbage(context.Background(), false)
	if len(e.Net.Collected) != 1 || rep.Networks != 1 || e.Counters.Removed("network") != 2 {
		t.Fatalf("libvirtd back: collected %v, report %+v, counted %d", e.Net.Collected, rep, e.Counters.Removed("network"))
	}
}

// TestCollectorRetriesFailedDel: a stopped pod whose CNI DEL failed gets
// DEL on the next pass (pending while it fails); its record stays, marked
// down, and is not torn down again.
func TestCollectorRetriesFailedDel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.PutPod(t, "stopped", func(sb *store.Sandbox) { sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY })
	e.PutPod(t, "ready", nil)
	e.Net.FailDel = errors.New("plugin bridge: exec: not found")
	if rep := e.gc.CollectGarbage(ctx, false); rep.Pending != 1 || rep.Networks != 0 {
		t.Fatalf("pass with DEL failing: %+v, want 1 pending", rep)
	}
	e.Net.FailDel = nil
	if rep := e.gc.CollectGarbage(ctx, false); rep.Pending != 0 || rep.Networks != 1 {
		t.Fatalf("pass after the plugin came back: %+v, want 1 network", rep)
	}
	sb, err := e.R.Store.Sandbox("stopped")
	if err != nil || !sb.NetDown || len(e.Net.Teardowns) != 1 || e.Net.Teardowns[0] != "stopped" {
		t.Fatalf("record %+v (%v), teardowns %v; want it kept, its network down", sb, err, e.Net.Teardowns)
	}
	if rep := e.gc.CollectGarbage(ctx, false); rep.Networks != 0 || len(e.Net.Teardowns) != 1 {
		t.Fatalf("third pass: %+v, teardowns %v; want nothing more", rep, e.Net.Teardowns)
	}
	if e.Counters.Removed("network") != 1 {
		t.Fatalf("networks counted: %d, want 1", e.Counters.Removed("network"))
	}
}

// TestCollectorRemovesPodsAfterTheirVM: a pod being removed waits for its
// VM's teardown; then its network and record go.
func TestCollectorRemovesPodsAfterTheirVM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.PutPod(t, "sb1", func(sb *store.Sandbox) { sb.Removing = true })
	e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	var rep GCReport
	e.gc.collectNetworks(&rep, false, true)
	if _, err := e.R.Store.Sandbox("sb1"); err != nil || rep.Pending != 0 || rep.Networks != 0 || len(e.Net.Teardowns) != 0 {
		t.Fatalf("a pod with a live VM: record %v, report %+v, teardowns %v; want it left for now", err, rep, e.Net.Teardowns)
	}
	c := e.R.Store
	rec, _ := c.Container("c1")
	rec.Removing = true
	if err := c.PutContainer(rec); err != nil {
		t.Fatal(err)
	}
	rep = e.gc.CollectGarbage(ctx, false) // the VM first, then its pod
	if _, err := c.AnyContainer("c1"); !errdefs.IsNotFound(err) {
		t.Fatalf("VM record after the pass: %v", err)
	}
	if _, err := c.Sandbox("sb1"); !errdefs.IsNotFound(err) || rep.Records != 1 || rep.Networks != 1 || len(e.Net.Teardowns) != 1 {
		t.Fatalf("pod after the pass: %v, report %+v, teardowns %v", err, rep, e.Net.Teardowns)
	}
}

// TestSandboxTeardown: what the collector owes each pod record.
func TestSandboxTeardown(t *testing.T) {
	t.Parallel()
	now, stale := time.Now().UnixNano(), time.Now().Add(-staleCreate-time.Minute).UnixNano()
	for _, tc := range []struct {
		name       string
		sb         store.Sandbox
		afterStart bool
		want       int
	}{
		{"ready", store.Sandbox{State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: now}, false, teardownNone},
		{"removing", store.Sandbox{Removing: true, CreatedAt: now}, false, teardownAll},
		{"creating, fresh", store.Sandbox{Creating: true, CreatedAt: now}, false, teardownNone},
		{"creating, after start", store.Sandbox{Creating: true, CreatedAt: now}, true, teardownAll},
		{"creating, stale", store.Sandbox{Creating: true, CreatedAt: stale}, false, teardownAll},
		{"stopped, network up", store.Sandbox{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Net: &podnet.Attachment{}, CreatedAt: now}, false, teardownNetwork},
		{"stopped, network down", store.Sandbox{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Net: &podnet.Attachment{}, NetDown: true}, false, teardownNone},
		{"stopped, no network", store.Sandbox{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}, false, teardownNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandboxTeardown(&tc.sb, tc.afterStart); got != tc.want {
				t.Fatalf("sandboxTeardown = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCollectorWithoutPodNetwork: no network, no namespaces to look at;
// VM records are still collected.
func TestCollectorWithoutPodNetwork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, noNetwork)
	e.PutPod(t, "sb1", nil)
	c := e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerRunning)
	c.Removing = true
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	rep := e.gc.CollectGarbage(context.Background(), false)
	if rep.Records != 1 || rep.Networks != 0 || rep.ForeignNetns != nil {
		t.Fatalf("report %+v", rep)
	}
	var none GCReport
	e.gc.collectNamespaces(context.Background(), &none)
	if none.Networks != 0 {
		t.Fatalf("namespaces collected without a pod network: %+v", none)
	}
}

// TestCollectorNamespacesUnreadable: a pass that cannot list the
// namespaces collects none and goes on.
func TestCollectorNamespacesUnreadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setNet(failingNet{e.Net})
	e.Net.Own = map[string]string{"orphan": "/x/i_orphan"}
	rep := e.gc.CollectGarbage(context.Background(), false)
	if rep.Networks != 0 || len(e.Net.Collected) != 0 || rep.Pending != 0 {
		t.Fatalf("report %+v, collected %v", rep, e.Net.Collected)
	}
}
