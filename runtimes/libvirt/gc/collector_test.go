package gc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// IDs of VMs the collector finds without a record (it adopts only IDs
// crimux mints: 32 hex digits).
const (
	orphanCtr = "0123456789abcdef0123456789abcde0"
	orphanSb  = "0123456789abcdef0123456789abcde1"
	orphanDom = "crimux-" + orphanCtr
)

// teardownEnv records VM c1 of pod sb1, running, with its cgroup, its
// directory and its domain; edit changes the record (and the env).
func teardownEnv(t *testing.T, edit func(*store.Container)) (*env, *store.Container) {
	t.Helper()
	return teardownEnvWith(t, func(_ *env, c *store.Container) {
		if edit != nil {
			edit(c)
		}
	})
}

func teardownEnvWith(t *testing.T, edit func(*env, *store.Container)) (*env, *store.Container) {
	t.Helper()
	e := newEnv(t)
	e.PutPod(t, "sb1", nil)
	c := e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.vmDir(t, "c1")
	if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
		t.Fatal(err)
	}
	edit(e, c)
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	return e, c
}

// TestFinishTeardowns: a record being removed, or abandoned half created
// (every one after a start, a stale one in a periodic pass), loses its
// domain, cgroup, directory and record; anything else is left alone.
func TestFinishTeardowns(t *testing.T) {
	t.Parallel()
	stale := time.Now().Add(-staleCreate - time.Minute).UnixNano()
	for _, tc := range []struct {
		name       string
		edit       func(*env, *store.Container)
		afterStart bool
		torn       bool
	}{
		{"removing", func(_ *env, c *store.Container) { c.Removing = true }, false, true},
		{"removing, after start", func(_ *env, c *store.Container) { c.Removing = true }, true, true},
		{"removing, domain already gone", func(e *env, c *store.Container) {
			c.Removing = true
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
			if err := e.Libvirt.Undefine(virt.Domain{Name: c.Domain}); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"removing, adopted without a cgroup", func(_ *env, c *store.Container) { c.Removing = true; c.CgroupParent = "" }, false, true},
		{"creating, after start", func(_ *env, c *store.Container) { c.Creating = true }, true, true},
		{"creating, fresh, periodic", func(_ *env, c *store.Container) { c.Creating = true }, false, false},
		{"creating, stale, periodic", func(_ *env, c *store.Container) { c.Creating, c.CreatedAt = true, stale }, false, true},
		{"live", nil, true, false},
		{"live and old", func(_ *env, c *store.Container) { c.CreatedAt = stale }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edit := tc.edit
			if edit == nil {
				edit = func(*env, *store.Container) {}
			}
			e, c := teardownEnvWith(t, edit)
			rep := e.gc.CollectGarbage(context.Background(), tc.afterStart)
			_, domain := e.hasDomain("crimux-c1")
			_, cgroup := e.Cgroups.Get("crimux-c1")
			dir := exists(c.Dir)
			_, recErr := e.R.Store.AnyContainer("c1")
			if tc.torn {
				if domain || (cgroup && c.CgroupParent != "") || dir || !errdefs.IsNotFound(recErr) {
					t.Fatalf("after teardown: domain %v, cgroup %v, dir %v, record %v; want all gone", domain, cgroup, dir, recErr)
				}
				if rep.Records != 1 || rep.Pending != 0 || e.Counters.Removed("record") != 1 {
					t.Fatalf("report %+v, records counted %d; want 1 record", rep, e.Counters.Removed("record"))
				}
				// The domain was the record's: not counted as an orphan.
				if rep.Domains != 0 || rep.Dirs != 0 {
					t.Fatalf("report %+v: a record's domain or dir counted as orphan", rep)
				}
				return
			}
			if !domain || !cgroup || !dir || recErr != nil {
				t.Fatalf("a VM owed nothing: domain %v, cgroup %v, dir %v, record %v; want all kept", domain, cgroup, dir, recErr)
			}
			if rep.Records != 0 || e.Counters.Removed("record") != 0 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

// TestFinishTeardownsRetries: a teardown that fails stays pending, its
// record, directory and what is left kept; the next pass finishes it.
func TestFinishTeardownsRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(*env)
		heal func(*env)
	}{
		{"undefine fails", func(e *env) { e.Libvirt.Fail("Undefine", boom) }, func(*env) {}},
		{"destroy and state fail", func(e *env) { e.Libvirt.Fail("Destroy", boom); e.Libvirt.Fail("State", nil, boom) }, func(*env) {}},
		{"lookup fails", func(e *env) { e.Libvirt.Fail("Lookup", boom) }, func(*env) {}},
		{"cgroup removal fails", func(e *env) { e.Cgroups.Fail = errors.New("EBUSY") }, func(e *env) { e.Cgroups.Fail = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, c := teardownEnv(t, func(c *store.Container) { c.Removing = true })
			tc.fail(e)
			rep := e.gc.CollectGarbage(ctx, false)
			if rep.Pending != 1 || rep.Records != 0 || rep.Dirs != 0 {
				t.Fatalf("failing pass: %+v, want 1 pending", rep)
			}
			if _, err := e.R.Store.AnyContainer("c1"); err != nil || !exists(c.Dir) {
				t.Fatalf("failing pass: record %v, dir kept %v; want both kept", err, exists(c.Dir))
			}
			tc.heal(e)
			rep = e.gc.CollectGarbage(ctx, false)
			if rep.Pending != 0 || rep.Records != 1 {
				t.Fatalf("next pass: %+v, want the record finished", rep)
			}
			if _, err := e.R.Store.AnyContainer("c1"); !errdefs.IsNotFound(err) || exists(c.Dir) {
				t.Fatalf("next pass: record %v, dir kept %v", err, exists(c.Dir))
			}
			if _, ok := e.hasDomain(c.Domain); ok {
				t.Fatal("next pass left the domain")
			}
		})
	}
}

// TestCollectorNeedsLibvirtForVMs: with libvirtd down a pass tears no VM
// down and removes no directory (it cannot tell which domains exist).
func TestCollectorNeedsLibvirtForVMs(t *testing.T) {
	t.Parallel()
	e, c := teardownEnv(t, func(c *store.Container) { c.Removing = true })
	orphan := e.vmDir(t, orphanCtr)
	e.Libvirt.SetDown(errors.New("libvirtd down"))
	rep := e.gc.CollectGarbage(context.Background(), true)
	if rep.Records+rep.Dirs+rep.Domains+rep.Pending != 0 {
		t.Fatalf("report with libvirtd down: %+v", rep)
	}
	if _, err := e.R.Store.AnyContainer("c1"); err != nil || !exists(c.Dir) || !exists(orphan) {
		t.Fatalf("with libvirtd down: record %v, dirs kept %v %v", err, exists(c.Dir), exists(orphan))
	}
}

// TestCollectDomains: what the collector does with each crimux-named
// domain that no record owns.
func TestCollectDomains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		meta    func(*testing.T) string
		xml     string // instead of meta
		state   virt.State
		fail    string // a libvirt method failing once
		adopted bool
		removed bool
		foreign bool
	}{
		{name: "running, ours", meta: ours, state: virt.StateRunning, adopted: true},
		{name: "paused, ours", meta: ours, state: virt.StatePaused, adopted: true},
		{name: "shut off, ours", meta: ours, state: virt.StateShutoff, removed: true},
		{name: "running, another instance's", meta: func(t *testing.T) string { return stamp(t, "other", orphanSb, orphanCtr) },
			state: virt.StateRunning, foreign: true},
		{name: "shut off, another instance's", meta: func(t *testing.T) string { return stamp(t, "other", orphanSb, orphanCtr) },
			state: virt.StateShutoff, foreign: true},
		{name: "running, unstamped", meta: func(*testing.T) string { return "" }, state: virt.StateRunning, foreign: true},
		{name: "shut off, unstamped", meta: func(*testing.T) string { return "" }, state: virt.StateShutoff, foreign: true},
		{name: "stamp of another container", meta: func(t *testing.T) string { return stamp(t, "i", orphanSb, orphanSb) },
			state: virt.StateShutoff, foreign: true},
		{name: "XML unreadable", meta: ours, state: virt.StateShutoff, fail: "XML", foreign: true},
		{name: "XML broken", xml: "<domain", state: virt.StateShutoff, foreign: true},
		{name: "shut off, ours, undefine fails", meta: ours, state: virt.StateShutoff, fail: "Undefine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			x := tc.xml
			if x == "" {
				x = domainXML(orphanDom, tc.meta(t))
			}
			e.Libvirt.Put(orphanDom, virtfake.Domain{XML: x, State: tc.state})
			dir := e.vmDir(t, orphanCtr)
			// Owned, and not crimux's: never looked at.
			e.PutPod(t, "sb1", nil)
			e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
			e.putDomain("vanilla", "", virt.StateShutoff)
			if tc.fail != "" {
				e.Libvirt.Fail(tc.fail, boom)
			}
			rep := e.gc.CollectGarbage(context.Background(), false)

			state, defined := e.hasDomain(orphanDom)
			c, recErr := e.R.Store.AnyContainer(orphanCtr)
			switch {
			case tc.adopted:
				if recErr != nil || !c.Adopted || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.SandboxID != orphanSb ||
					c.Domain != orphanDom || c.Dir != e.R.VMDir(orphanCtr) || c.CgroupParent != "" || c.StartedAt == 0 {
					t.Fatalf("adopted record: %+v, %v", c, recErr)
				}
				sb, err := e.R.Store.Sandbox(orphanSb)
				if err != nil || sb.ContainerID != orphanCtr || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY ||
					sb.Config.GetMetadata().GetName() != "web" || sb.Config.GetMetadata().GetNamespace() != "ns" || sb.Net != nil {
					t.Fatalf("adopted pod: %+v, %v", sb, err)
				}
				if rep.Adopted != 1 || !defined || state != tc.state || !exists(dir) {
					t.Fatalf("report %+v, domain %v (%v), dir kept %v", rep, defined, state, exists(dir))
				}
				// Adopted, it is the VM API's like any other.
				if _, err := e.R.Store.Container(orphanCtr); err != nil {
					t.Fatalf("adopted VM not live: %v", err)
				}
			case tc.removed:
				if defined || rep.Domains != 1 || e.Counters.Removed("domain") != 1 {
					t.Fatalf("stopped orphan: defined %v, report %+v", defined, rep)
				}
				if exists(dir) || rep.Dirs != 1 || e.Counters.Removed("dir") != 1 {
					t.Fatalf("stopped orphan's dir kept %v, report %+v", exists(dir), rep)
				}
			default:
				if !defined || state != tc.state || !exists(dir) || rep.Domains+rep.Dirs+rep.Adopted != 0 {
					t.Fatalf("domain %v (%v), dir kept %v, report %+v; want all left alone", defined, state, exists(dir), rep)
				}
				if e.Libvirt.Calls("Destroy")+e.Libvirt.Calls("Undefine")+e.Libvirt.Calls("SetMetadata") != 0 && tc.fail != "Undefine" {
					t.Fatalf("libvirt was asked to change a domain left alone")
				}
			}
			if !tc.adopted && !errdefs.IsNotFound(recErr) {
				t.Fatalf("record of a domain not adopted: %+v, %v", c, recErr)
			}
			if tc.foreign != (len(rep.Foreign) == 1 && rep.Foreign[0] == orphanDom) {
				t.Fatalf("reported foreign: %v, want %v", rep.Foreign, tc.foreign)
			}
			if _, ok := e.hasDomain("crimux-c1"); !ok || !exists(e.R.VMDir("c1")) {
				t.Fatal("the collector touched a VM its record owns")
			}
			if _, ok := e.hasDomain("vanilla"); !ok {
				t.Fatal("the collector touched a domain that is not crimux's")
			}
		})
	}
}

func ours(t *testing.T) string { return stamp(t, "i", orphanSb, orphanCtr) }

// TestAdoptKeepsThePodNetwork: an adopted pod gets the namespace this
// crimux still has for it, so its removal runs CNI DEL; the pass does not
// collect that namespace as an orphan.
func TestAdoptKeepsThePodNetwork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putDomain(orphanDom, ours(t), virt.StateRunning)
	e.Net.Own = map[string]string{orphanSb: "/run/test/netns/i_" + orphanSb, "orphan": "/x/i_orphan"}
	rep := e.gc.CollectGarbage(context.Background(), true)
	sb, err := e.R.Store.Sandbox(orphanSb)
	if err != nil || sb.Net == nil || sb.Net.NetNS != "/run/test/netns/i_"+orphanSb {
		t.Fatalf("adopted pod %+v, %v; want its namespace", sb, err)
	}
	if rep.Adopted != 1 || len(e.Net.Collected) != 1 || e.Net.Collected[0] != "orphan" {
		t.Fatalf("report %+v, collected %v; want the pod's namespace kept, the orphan collected", rep, e.Net.Collected)
	}
}

// TestCollectDirs: a VM directory goes when no record names it and no
// domain of its name is left; a record's, or a domain's, stays.
func TestCollectDirs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutPod(t, "sb1", nil)
	live := e.PutVM(t, "sb1", "live", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
	creating := e.PutVM(t, "sb1", "creating", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	creating.Creating = true
	if err := e.R.Store.PutContainer(creating); err != nil {
		t.Fatal(err)
	}
	orphan := e.vmDir(t, "orphan")
	foreign := e.vmDir(t, "foreign")
	e.putDomain("crimux-foreign", stamp(t, "other", orphanSb, "foreign"), virt.StateShutoff)
	rep := e.gc.CollectGarbage(context.Background(), false)
	if exists(orphan) || rep.Dirs != 1 || e.Counters.Removed("dir") != 1 {
		t.Fatalf("orphan dir kept %v, report %+v", exists(orphan), rep)
	}
	for _, d := range []string{live.Dir, creating.Dir, foreign} {
		if !exists(d) {
			t.Errorf("%s removed", d)
		}
	}
	// No vms dir at all: nothing to do.
	if err := os.RemoveAll(filepath.Join(e.Dir, "vms")); err != nil {
		t.Fatal(err)
	}
	if rep := e.gc.CollectGarbage(context.Background(), false); rep.Dirs != 0 {
		t.Fatalf("report without a vms dir: %+v", rep)
	}
}

// TestCollectorCounts: one pass's removals, counted by kind.
func TestCollectorCounts(t *testing.T) {
	t.Parallel()
	e, _ := teardownEnv(t, func(c *store.Container) { c.Removing = true })
	e.putDomain(orphanDom, ours(t), virt.StateShutoff)
	e.vmDir(t, "stray")
	e.Net.Own = map[string]string{"orphan": "/x/i_orphan"}
	rep := e.gc.CollectGarbage(context.Background(), false)
	if rep.Records != 1 || rep.Domains != 1 || rep.Dirs != 1 || rep.Networks != 1 {
		t.Fatalf("report %+v, want one of each", rep)
	}
	for _, kind := range []string{"record", "domain", "dir", "network"} {
		if n := e.Counters.Removed(kind); n != 1 {
			t.Errorf("%s counted %d times, want 1", kind, n)
		}
	}
	// A pass with nothing to do counts nothing more.
	if rep := e.gc.CollectGarbage(context.Background(), false); rep.Records+rep.Domains+rep.Dirs+rep.Networks != 0 {
		t.Fatalf("second pass: %+v", rep)
	}
	if n := e.Counters.Removed("record"); n != 1 {
		t.Fatalf("records counted %d after an idle pass, want 1", n)
	}
}

// TestCollectorListAllFails: a pass whose domain listing fails removes
// no domain.
func TestCollectorListAllFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putDomain(orphanDom, ours(t), virt.StateShutoff)
	e.Libvirt.Fail("ListAll", boom)
	rep := e.gc.CollectGarbage(context.Background(), false)
	if _, ok := e.hasDomain(orphanDom); !ok || rep.Domains != 0 {
		t.Fatalf("domain removed with ListAll failing: report %+v", rep)
	}
}

// TestRunStops: the periodic collector returns when its context ends.
func TestRunStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.gc.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestSetIntervalApplies: a collector started with an hour's period
// passes within moments once a reload makes its period short, and a
// stopped domain nobody owns goes.
func TestSetIntervalApplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.R.Opts.GCInterval = time.Hour
	e.putDomain(orphanDom, ours(t), virt.StateShutoff)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.gc.Run(ctx)
	time.Sleep(100 * time.Millisecond)
	if _, ok := e.hasDomain(orphanDom); !ok {
		t.Fatal("a pass ran before the hour's period")
	}
	e.gc.SetInterval(10 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := e.hasDomain(orphanDom); ok; _, ok = e.hasDomain(orphanDom) {
		if time.Now().After(deadline) {
			t.Fatal("no pass within 5 s of SetInterval(10ms)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
