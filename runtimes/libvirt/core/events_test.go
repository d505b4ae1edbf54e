package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestUserStopIsNoExit: a stopped domain of a VM the user shut down or
// hibernated leaves its container running; any other stop (and a domain
// gone) ends it.
func TestUserStopIsNoExit(t *testing.T) {
	for _, tc := range []struct {
		power  vmtypes.PowerState
		reason string
		exits  bool
	}{
		{vmtypes.PowerShutdown, "Completed", false},
		{vmtypes.PowerHibernate, "Killed", false},
		{vmtypes.PowerRunning, "Completed", true},
		{vmtypes.PowerPaused, "Crashed", true},
		{vmtypes.PowerHibernate, "DomainGone", true},
	} {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, tc.power)
		setDomainState(e, "crimux-c1", virt.StateShutoff) // it stopped: that is the event
		e.R.DomainStopped("crimux-c1", 0, tc.reason)
		c, err := e.R.Store.Container("c1")
		if err != nil {
			t.Fatal(err)
		}
		if exited := c.State == runtimeapi.ContainerState_CONTAINER_EXITED; exited != tc.exits {
			t.Errorf("power %s, stop %s: exited %v, want %v", tc.power, tc.reason, exited, tc.exits)
		}
	}
}

// TestStopOfADomainThatRunsAgain: a stop event of a domain that runs
// again (a snapshot revert restarts qemu) is no exit; when libvirt cannot
// tell, it is one.
func TestStopOfADomainThatRunsAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*coretest.Env)
		exits bool
	}{
		{"runs again", func(*coretest.Env) {}, false},
		{"paused again", func(e *coretest.Env) { setDomainState(e, "crimux-c1", virt.StatePaused) }, false},
		{"libvirtd down", func(e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }, true},
		{"lookup fails", func(e *coretest.Env) { e.Libvirt.Fail("Lookup", errUnavailable) }, true},
		{"state unknown", func(e *coretest.Env) { e.Libvirt.Fail("State", errUnavailable) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := coretest.New(t)
			putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			tc.setup(e)
			e.R.DomainStopped("crimux-c1", core.ExitKilled, "Killed")
			if exited := record(t, e, "c1").State == runtimeapi.ContainerState_CONTAINER_EXITED; exited != tc.exits {
				t.Fatalf("exited %v, want %v", exited, tc.exits)
			}
		})
	}
	t.Run("unknown or not running: nothing", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
		e.R.DomainStopped("crimux-c1", core.ExitKilled, "Killed")
		e.R.DomainStopped("crimux-nope", core.ExitKilled, "Killed")
		if c := record(t, e, "c1"); c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("a created VM's stop made it %s", c.State)
		}
	})
}

// TestOnConnect: the first pass resyncs, then runs AfterResync (first),
// then Recovered is closed; a reconnect runs AfterResync again, not
// first; failed subscriptions do not keep the runtime from recovering.
func TestOnConnect(t *testing.T) {
	e := coretest.New(t)
	var mu sync.Mutex
	var firsts []bool
	var sawResync bool
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	setDomainState(e, "crimux-c1", virt.StateShutoff)
	e.R.AfterResync = func(_ context.Context, first bool) {
		mu.Lock()
		defer mu.Unlock()
		firsts = append(firsts, first)
		c, _ := e.R.Store.Container("c1")
		sawResync = c != nil && c.State == runtimeapi.ContainerState_CONTAINER_EXITED
	}
	select {
	case <-e.R.Recovered():
		t.Fatal("recovered before connecting")
	default:
	}
	e.Connect(t)
	mu.Lock()
	if len(firsts) != 1 || !firsts[0] || !sawResync {
		t.Fatalf("AfterResync calls %v (resynced before: %v), want one, first, after the resync", firsts, sawResync)
	}
	mu.Unlock()

	// A reconnect whose subscriptions fail: it resyncs and returns.
	l2 := virtfake.New()
	l2.Fail("LifecycleEvents", errUnavailable)
	l2.Fail("RebootEvents", errUnavailable)
	done := make(chan struct{})
	go func() { defer close(done); e.R.OnConnect(context.Background(), l2) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("OnConnect without event streams did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(firsts) != 2 || firsts[1] {
		t.Fatalf("AfterResync calls %v, want a second, not first", firsts)
	}
}

// TestOnConnectWithoutAfterResync: the runtime recovers without a
// collector.
func TestOnConnectWithoutAfterResync(t *testing.T) {
	e := coretest.New(t)
	stop := e.Connect(t)
	stop()
	stop() // twice: harmless
}

// TestLifecycleEvents: what each stop of a running VM records while
// crimux listens.
func TestLifecycleEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		power  vmtypes.PowerState
		act    func(f *virtfake.Libvirt, name string)
		exits  bool
		code   int32
		reason string
	}{
		{"crash", vmtypes.PowerRunning, func(f *virtfake.Libvirt, n string) { f.Crash(n) }, true, core.ExitCrashed, "Crashed"},
		{"guest power-off", vmtypes.PowerRunning, func(f *virtfake.Libvirt, n string) { _ = f.Shutdown(virt.Domain{Name: n}) }, true, core.ExitClean, "Completed"},
		{"qemu killed", vmtypes.PowerRunning, func(f *virtfake.Libvirt, n string) { _ = f.Destroy(virt.Domain{Name: n}) }, true, core.ExitKilled, "Killed"},
		// The VM API records the power state, then powers off.
		{"user power-off", vmtypes.PowerShutdown, func(f *virtfake.Libvirt, n string) { _ = f.Shutdown(virt.Domain{Name: n}) }, false, 0, ""},
		{"user hibernate", vmtypes.PowerHibernate, func(f *virtfake.Libvirt, n string) { _ = f.ManagedSave(virt.Domain{Name: n}) }, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := coretest.New(t)
			putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			// The witness: a VM whose crash, seen after c1's event, says
			// c1's event was handled (one stream, in order).
			putVM(t, e, "sb2", "w", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			e.Libvirt.Put("other-vm", virtfake.Domain{State: virt.StateRunning})
			if tc.power != vmtypes.PowerRunning {
				c := record(t, e, "c1")
				c.PowerState = tc.power
				if err := e.R.Store.PutContainer(c); err != nil {
					t.Fatal(err)
				}
			}
			e.Connect(t)
			e.Libvirt.Crash("other-vm") // not crimux's: ignored
			tc.act(e.Libvirt, "crimux-c1")
			e.Libvirt.Crash("crimux-w")
			coretest.WaitFor(t, "the witness's exit", func() bool {
				return record(t, e, "w").State == runtimeapi.ContainerState_CONTAINER_EXITED
			})
			c := record(t, e, "c1")
			if exited := c.State == runtimeapi.ContainerState_CONTAINER_EXITED; exited != tc.exits {
				t.Fatalf("exited %v, want %v", exited, tc.exits)
			}
			if tc.exits && (c.ExitCode != tc.code || c.Reason != tc.reason) {
				t.Fatalf("exit %d %q, want %d %q", c.ExitCode, c.Reason, tc.code, tc.reason)
			}
			if !tc.exits && c.Power() != tc.power {
				t.Fatalf("power state %s, want %s kept", c.Power(), tc.power)
			}
		})
	}
}

// TestPausedIOErrorEvent: a VM qemu paused on a write that found no
// space is no exit: it is counted paused on a full disk (nospace).
func TestPausedIOErrorEvent(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.R.OnLifecycle(virt.LifecycleEvent{Domain: "crimux-c1", PausedIOError: true})
	if _, ok := e.R.NoSpace.Paused("crimux-c1"); !ok {
		t.Fatal("not counted as paused on a full disk")
	}
	if c := record(t, e, "c1"); c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("state %v, want running", c.State)
	}
}

// TestRebootEvents: a guest's reboot wakes whoever waits for it, while
// the connection is followed, and only then.
func TestRebootEvents(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	stop := e.Connect(t)
	rebooted, cancel, err := e.R.Reboots.Wait(e.Libvirt, "crimux-c1")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if err := e.Libvirt.Reboot(virt.Domain{Name: "crimux-c1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rebooted:
	case <-time.After(5 * time.Second):
		t.Fatal("the reboot event did not wake its waiter")
	}
	stop()
	if _, _, err := e.R.Reboots.Wait(e.Libvirt, "crimux-c1"); err == nil {
		t.Fatal("a reboot can be waited for after the connection ended")
	}
}

// TestResync: what the first pass after a (re)connect makes of records
// that libvirt contradicts.
func TestResync(t *testing.T) {
	running, created, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_EXITED
	gone := func(f *virtfake.Libvirt) {
		f.Edit("crimux-c1", func(d *virtfake.Domain) { d.State = virt.StateShutoff })
		_ = f.Undefine(virt.Domain{Name: "crimux-c1"})
	}
	state := func(s virt.State) func(*virtfake.Libvirt) {
		return func(f *virtfake.Libvirt) { f.Edit("crimux-c1", func(d *virtfake.Domain) { d.State = s }) }
	}
	for _, tc := range []struct {
		name   string
		state  runtimeapi.ContainerState
		power  vmtypes.PowerState
		domain func(*virtfake.Libvirt)
		want   runtimeapi.ContainerState
		code   int32
		reason string
	}{
		{"running, node rebooted, domain off", running, vmtypes.PowerRunning, state(virt.StateShutoff), exited, core.ExitNodeRebooted, core.ReasonNodeRebooted},
		{"running, node rebooted, domain gone", running, vmtypes.PowerRunning, gone, exited, core.ExitNodeRebooted, core.ReasonNodeRebooted},
		{"running, node rebooted, domain runs", running, vmtypes.PowerRunning, nil, running, 0, ""},
		{"running, domain gone", running, vmtypes.PowerRunning, gone, exited, core.ExitKilled, "DomainGone"},
		{"running, user power state, domain gone", running, vmtypes.PowerShutdown, gone, exited, core.ExitKilled, "DomainGone"},
		{"running, domain off", running, vmtypes.PowerRunning, state(virt.StateShutoff), exited, core.ExitClean, "Completed"},
		{"running, domain runs", running, vmtypes.PowerRunning, nil, running, 0, ""},
		{"running, domain state unknown", running, vmtypes.PowerRunning, func(f *virtfake.Libvirt) { f.Fail("State", errUnavailable) }, running, 0, ""},
		{"running, domain off, domains not listed", running, vmtypes.PowerRunning, func(f *virtfake.Libvirt) {
			f.Edit("crimux-c1", func(d *virtfake.Domain) { d.State = virt.StateShutoff })
			f.Fail("ListAll", errUnavailable)
		}, running, 0, ""},
		{"shut down by its user", running, vmtypes.PowerShutdown, nil, running, 0, ""},
		{"hibernated by its user", running, vmtypes.PowerHibernate, nil, running, 0, ""},
		{"created, domain runs: start unrecorded", created, "", state(virt.StateRunning), running, 0, ""},
		{"created, domain off", created, "", nil, created, 0, ""},
		{"created, domain gone", created, "", gone, created, 0, ""},
		{"created, domain state unknown", created, "", func(f *virtfake.Libvirt) {
			f.Edit("crimux-c1", func(d *virtfake.Domain) { d.State = virt.StateRunning })
			f.Fail("State", errUnavailable)
		}, created, 0, ""},
		{"exited, domain runs", exited, "", state(virt.StateRunning), exited, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := coretest.New(t)
			c := putVM(t, e, "sb1", "c1", tc.state, tc.power)
			if tc.state == created { // a start recorded late starts its console copier
				c.LogPath = e.Dir + "/c1.log"
				if err := e.R.Store.PutContainer(c); err != nil {
					t.Fatal(err)
				}
				if err := writeFile(c.Dir+"/console.log", "booted\n"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.domain != nil {
				tc.domain(e.Libvirt)
			}
			boot := time.Now().Add(-time.Hour)
			if strings.Contains(tc.name, "node rebooted") { // after the VM started
				boot = time.Now().Add(time.Minute)
			}
			e.R.BootTime = func() time.Time { return boot }
			e.Connect(t)
			c = record(t, e, "c1")
			if c.State != tc.want {
				t.Fatalf("state %s, want %s", c.State, tc.want)
			}
			if tc.want == exited && tc.state != exited && (c.ExitCode != tc.code || c.Reason != tc.reason) {
				t.Fatalf("exit %d %q, want %d %q", c.ExitCode, c.Reason, tc.code, tc.reason)
			}
			if tc.state == created && tc.want == running {
				if c.StartedAt == 0 {
					t.Fatal("start recorded without its time")
				}
				if e.Libvirt.Calls("Start") != 0 {
					t.Fatal("a running domain was started again")
				}
				coretest.WaitFor(t, "its console in the CRI log", func() bool { return fileContains(c.LogPath, " stdout F booted\n") })
			}
		})
	}
}

// TestResyncListsOnce: a restart's resync asks libvirt one list for
// all its records, not a lookup and a state per record (a restart with
// hundreds of VM records waited on as many calls); only a VM whose record
// the list contradicts (started unrecorded, or off) has its state read
// again, under its pod's lock.
func TestResyncListsOnce(t *testing.T) {
	e := coretest.New(t)
	want := map[string]runtimeapi.ContainerState{}
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("c%d", i)
		switch i % 4 {
		case 0: // running, and so it stays
			putVM(t, e, "sb"+id, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			want[id] = runtimeapi.ContainerState_CONTAINER_RUNNING
		case 1: // running, its domain off meanwhile
			putVM(t, e, "sb"+id, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			setDomainState(e, "crimux-"+id, virt.StateShutoff)
			want[id] = runtimeapi.ContainerState_CONTAINER_EXITED
		case 2: // created, never started
			putVM(t, e, "sb"+id, id, runtimeapi.ContainerState_CONTAINER_CREATED, "")
			want[id] = runtimeapi.ContainerState_CONTAINER_CREATED
		case 3: // created, its domain started unrecorded
			putVM(t, e, "sb"+id, id, runtimeapi.ContainerState_CONTAINER_CREATED, "")
			setDomainState(e, "crimux-"+id, virt.StateRunning)
			want[id] = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
	}
	lookups, states := e.Libvirt.Calls("Lookup"), e.Libvirt.Calls("State")
	e.Connect(t)
	for id, st := range want {
		if c := record(t, e, id); c.State != st {
			t.Errorf("%s: state %s, want %s", id, c.State, st)
		}
	}
	if n := e.Libvirt.Calls("ListAll"); n != 1 {
		t.Errorf("ListAll called %d times, want once", n)
	}
	if n := e.Libvirt.Calls("Lookup") - lookups + e.Libvirt.Calls("State") - states; n != 2*30 {
		t.Errorf("%d lookups and states, want two for each of the 30 VMs whose record libvirt contradicts, read again under its pod's lock", n)
	}
}

// TestStartedUnrecordedLosesToACall: a call that changed the record
// under the pod's lock while the resync looked at libvirt wins.
func TestStartedUnrecordedLosesToACall(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	setDomainState(e, "crimux-c1", virt.StateRunning)
	unlock := e.R.Locks.Lock("sb1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.R.OnConnect(ctx, e.Libvirt) }()
	defer func() { cancel(); e.Libvirt.Disconnect(); <-done }()
	coretest.WaitFor(t, "the resync to wait for the pod's lock", func() bool { return e.R.LockWaiters("sb1") == 2 })
	c := record(t, e, "c1")
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	unlock()
	select {
	case <-e.R.Recovered():
	case <-time.After(5 * time.Second):
		t.Fatal("the runtime did not recover")
	}
	if c := record(t, e, "c1"); c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("state %s, want the call's EXITED kept", c.State)
	}
}

// TestResumeConsoles: the copiers of running VMs restart after a start,
// and only theirs.
func TestResumeConsoles(t *testing.T) {
	e := coretest.New(t)
	logs := map[string]string{}
	for _, st := range []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED} {
		id := st.String()
		c := putVM(t, e, "sb-"+id, id, st, "")
		c.LogPath = e.Dir + "/" + id + ".log"
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		logs[id] = c.LogPath
		if err := writeFile(c.Dir+"/console.log", "hello\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	e.R.ResumeConsoles()
	running := logs[runtimeapi.ContainerState_CONTAINER_RUNNING.String()]
	coretest.WaitFor(t, "the running VM's console in its CRI log", func() bool { return fileContains(running, " stdout F hello\n") })
	e.R.Console.StopAll()
	if exists(logs[runtimeapi.ContainerState_CONTAINER_EXITED.String()]) {
		t.Fatal("a copier was started for an exited VM")
	}
}
