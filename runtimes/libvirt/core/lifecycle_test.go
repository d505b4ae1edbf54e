package core_test

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestShutdownDomain: ACPI first, destroy after the grace; what each way
// of ending is reported as.
func TestShutdownDomain(t *testing.T) {
	const name = "crimux-c1"
	for _, tc := range []struct {
		name     string
		setup    func(*virtfake.Libvirt) // the domain runs unless setup changes it
		wrap     func(*virtfake.Libvirt) virt.Libvirt
		grace    time.Duration
		cancel   bool
		code     int32
		reason   string
		wantErr  bool
		minTime  time.Duration // at least (the grace waited)
		maxTime  time.Duration // at most (no grace waited)
		shutdown int           // ACPI presses
		destroy  int
	}{
		{name: "ACPI obeyed", grace: 10 * time.Second, code: core.ExitClean, reason: "Completed", maxTime: 2 * time.Second, shutdown: 1},
		{name: "ACPI ignored: destroyed after the grace", grace: 150 * time.Millisecond,
			setup: func(f *virtfake.Libvirt) { f.Edit(name, func(d *virtfake.Domain) { d.IgnoresACPI = true }) },
			code:  core.ExitKilled, reason: "Killed", minTime: 150 * time.Millisecond, shutdown: 1, destroy: 1},
		{name: "no grace: destroyed at once", grace: 0, code: core.ExitKilled, reason: "Killed", maxTime: 2 * time.Second, destroy: 1},
		{name: "ACPI fails: destroyed at once", grace: 10 * time.Second,
			setup: func(f *virtfake.Libvirt) { f.Fail("Shutdown", errBoom) },
			code:  core.ExitKilled, reason: "Killed", maxTime: 2 * time.Second, shutdown: 1, destroy: 1},
		{name: "cancelled while waiting: destroyed at once", grace: 10 * time.Second, cancel: true,
			setup: func(f *virtfake.Libvirt) { f.Edit(name, func(d *virtfake.Domain) { d.IgnoresACPI = true }) },
			code:  core.ExitKilled, reason: "Killed", maxTime: 2 * time.Second, shutdown: 1, destroy: 1},
		{name: "already off", grace: 10 * time.Second,
			setup: func(f *virtfake.Libvirt) { f.Edit(name, func(d *virtfake.Domain) { d.State = virt.StateShutoff }) },
			code:  core.ExitClean, reason: "Completed", maxTime: 2 * time.Second},
		{name: "domain gone", grace: 10 * time.Second,
			setup: func(f *virtfake.Libvirt) {
				f.Edit(name, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
				_ = f.Undefine(virt.Domain{Name: name})
			},
			code: core.ExitKilled, reason: "DomainGone", maxTime: 2 * time.Second},
		{name: "lookup fails", grace: 10 * time.Second,
			setup:   func(f *virtfake.Libvirt) { f.Fail("Lookup", errUnavailable) },
			wantErr: true, maxTime: 2 * time.Second},
		{name: "state unknown", grace: 10 * time.Second,
			setup:   func(f *virtfake.Libvirt) { f.Fail("State", errUnavailable) },
			wantErr: true, maxTime: 2 * time.Second},
		{name: "destroy fails, qemu gone anyway", grace: 0,
			wrap: func(f *virtfake.Libvirt) virt.Libvirt { return destroyFails{f, true} },
			code: core.ExitClean, reason: "Completed", maxTime: 2 * time.Second},
		{name: "destroy fails, qemu runs", grace: 0,
			wrap:    func(f *virtfake.Libvirt) virt.Libvirt { return destroyFails{f, false} },
			wantErr: true, maxTime: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := virtfake.New()
			f.Put(name, virtfake.Domain{State: virt.StateRunning})
			if tc.setup != nil {
				tc.setup(f)
			}
			var l virt.Libvirt = f
			if tc.wrap != nil {
				l = tc.wrap(f)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			start := time.Now()
			code, reason, err := core.ShutdownDomain(ctx, l, name, tc.grace)
			took := time.Since(start)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ShutdownDomain = %d %q, want an error", code, reason)
				}
			} else if err != nil || code != tc.code || reason != tc.reason {
				t.Fatalf("ShutdownDomain = %d %q %v, want %d %q", code, reason, err, tc.code, tc.reason)
			}
			if took < tc.minTime || (tc.maxTime > 0 && took > tc.maxTime) {
				t.Fatalf("took %s, want between %s and %s", took, tc.minTime, tc.maxTime)
			}
			if n := f.Calls("Shutdown"); n != tc.shutdown {
				t.Errorf("%d ACPI presses, want %d", n, tc.shutdown)
			}
			if tc.wrap == nil {
				if n := f.Calls("Destroy"); n != tc.destroy {
					t.Errorf("%d destroys, want %d", n, tc.destroy)
				}
			}
			if !tc.wantErr {
				if d, ok := f.Domain(name); ok && d.State != virt.StateShutoff {
					t.Errorf("domain %s after a successful shutdown", d.State)
				}
			}
		})
	}
}

// TestStopVM: a running VM is stopped and recorded exited, with its
// STOPPED event; a VM that does not run is left alone.
func TestStopVM(t *testing.T) {
	ctx := context.Background()
	t.Run("running", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		evs := events(t, e)
		if err := e.R.StopVM(ctx, "c1", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c := record(t, e, "c1")
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED || c.ExitCode != 0 || c.Reason != "Completed" || c.FinishedAt == 0 {
			t.Fatalf("record after stop: %s exit %d %q finished %d", c.State, c.ExitCode, c.Reason, c.FinishedAt)
		}
		if s := domainState(t, e, "crimux-c1"); s != virt.StateShutoff {
			t.Fatalf("domain %s after stop", s)
		}
		got := evs()
		if len(got) != 1 || got[0].ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || got[0].ContainerId != "c1" {
			t.Fatalf("events %v, want one STOPPED of c1", got)
		}
		if got[0].GetPodSandboxStatus().GetId() != "sb1" {
			t.Fatalf("STOPPED event without its pod: %v", got[0])
		}
	})
	t.Run("stop signal SIGKILL: destroyed at once, whatever the grace", func(t *testing.T) {
		e := coretest.New(t)
		c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		c.Config.StopSignal = runtimeapi.Signal_SIGNAL_SIGKILL
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := e.R.StopVM(ctx, "c1", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("stop took %s, want at once", took)
		}
		c = record(t, e, "c1")
		if c.ExitCode != core.ExitKilled || c.Reason != "Killed" || e.Libvirt.Calls("Shutdown") != 0 || e.Libvirt.Calls("Destroy") != 1 {
			t.Fatalf("exit %d %q, %d ACPI presses, %d destroys; want 137 Killed, destroyed without a press",
				c.ExitCode, c.Reason, e.Libvirt.Calls("Shutdown"), e.Libvirt.Calls("Destroy"))
		}
	})
	t.Run("stop signal SIGTERM: the ACPI press", func(t *testing.T) {
		e := coretest.New(t)
		c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		c.Config.StopSignal = runtimeapi.Signal_SIGNAL_SIGTERM
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		if err := e.R.StopVM(ctx, "c1", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if c = record(t, e, "c1"); c.ExitCode != 0 || c.Reason != "Completed" || e.Libvirt.Calls("Shutdown") != 1 {
			t.Fatalf("exit %d %q, %d ACPI presses; want a clean power-off", c.ExitCode, c.Reason, e.Libvirt.Calls("Shutdown"))
		}
	})
	t.Run("paused: resumed to hear the power button", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
		if s := domainState(t, e, "crimux-c1"); s != virt.StatePaused {
			t.Fatalf("setup: domain %s", s)
		}
		if err := e.R.StopVM(ctx, "c1", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c := record(t, e, "c1")
		if e.Libvirt.Calls("Resume") != 1 || c.Reason != "Completed" || c.ExitCode != 0 {
			t.Fatalf("resumes %d, exit %d %q; want the guest resumed and powered off cleanly", e.Libvirt.Calls("Resume"), c.ExitCode, c.Reason)
		}
	})
	t.Run("paused, resume fails: killed after the grace", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
		e.Libvirt.Fail("Resume", errBoom)
		if err := e.R.StopVM(ctx, "c1", 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if c := record(t, e, "c1"); c.ExitCode != core.ExitKilled || c.Reason != "Killed" {
			t.Fatalf("exit %d %q, want 137 Killed", c.ExitCode, c.Reason)
		}
	})
	t.Run("not running: nothing done", func(t *testing.T) {
		e := coretest.New(t)
		for _, st := range []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_EXITED} {
			putVM(t, e, "sb-"+st.String(), st.String(), st, "")
			if err := e.R.StopVM(ctx, st.String(), time.Second); err != nil {
				t.Fatal(err)
			}
			if c := record(t, e, st.String()); c.State != st {
				t.Fatalf("%s became %s", st, c.State)
			}
		}
		if n := e.Libvirt.Calls("Lookup"); n != 0 {
			t.Fatalf("libvirt asked %d times about VMs that do not run", n)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		e := coretest.New(t)
		if err := e.R.StopVM(ctx, "nope", time.Second); !errdefs.IsNotFound(err) {
			t.Fatalf("StopVM of an unknown VM: %v, want NotFound", err)
		}
	})
	t.Run("libvirtd down", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		e.Libvirt.SetDown(errUnavailable)
		if err := e.R.StopVM(ctx, "c1", time.Second); !errdefs.IsUnavailable(err) {
			t.Fatalf("StopVM with libvirtd down: %v, want Unavailable", err)
		}
		if c := record(t, e, "c1"); c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("record %s after a failed stop, want RUNNING", c.State)
		}
	})
	t.Run("shutdown fails", func(t *testing.T) {
		e := coretest.New(t)
		putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		e.Libvirt.Fail("Lookup", errUnavailable)
		err := e.R.StopVM(ctx, "c1", time.Second)
		if !errdefs.IsUnavailable(err) {
			t.Fatalf("StopVM: %v, want Unavailable", err)
		}
		if c := record(t, e, "c1"); c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("record %s after a failed stop, want RUNNING", c.State)
		}
	})
}

// TestMarkExited: the first cause wins, and only it is published.
func TestMarkExited(t *testing.T) {
	e := coretest.New(t)
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	evs := events(t, e)
	if err := e.R.SaveExit(c, core.ExitCrashed, "Crashed", "qemu died"); err != nil {
		t.Fatal(err)
	}
	if err := e.R.SaveExit(c, core.ExitClean, "Completed", ""); err != nil {
		t.Fatal(err)
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_EXITED || c.ExitCode != core.ExitCrashed || c.Reason != "Crashed" || c.Message != "qemu died" {
		t.Fatalf("after two exits: %s %d %q %q; want the first", c.State, c.ExitCode, c.Reason, c.Message)
	}
	if saved, err := e.R.Store.Container("c1"); err != nil || saved.State != runtimeapi.ContainerState_CONTAINER_EXITED || saved.ExitCode != core.ExitCrashed {
		t.Fatalf("saved exit: %+v, %v", saved, err)
	}
	got := evs()
	if len(got) != 1 || got[0].ContainersStatuses[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("events %v, want one STOPPED carrying the exit", got)
	}
}

// TestRemoveVM: everything the VM owns goes, then its record; the pod
// forgets it; DELETED is published.
func TestRemoveVM(t *testing.T) {
	for _, st := range []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED} {
		t.Run(st.String(), func(t *testing.T) {
			e := coretest.New(t)
			c := putVM(t, e, "sb1", "c1", st, vmtypes.PowerRunning)
			if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
				t.Fatal(err)
			}
			evs := events(t, e)
			if err := e.R.RemoveVM(context.Background(), "c1"); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.Libvirt.Domain("crimux-c1"); ok {
				t.Error("domain left")
			}
			if _, ok := e.Cgroups.Get("crimux-c1"); ok {
				t.Error("cgroup left")
			}
			if exists(c.Dir) {
				t.Error("VM dir left")
			}
			if e.Record(t, "c1") != nil {
				t.Error("record left")
			}
			if sb, err := e.R.Store.Sandbox("sb1"); err != nil || sb.ContainerID != "" {
				t.Errorf("pod after its VM's removal: %+v, %v; want it without a container", sb, err)
			}
			got := evs()
			if len(got) != 1 || got[0].ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
				t.Fatalf("events %v, want one DELETED", got)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		e := coretest.New(t)
		if err := e.R.RemoveVM(context.Background(), "nope"); !errdefs.IsNotFound(err) {
			t.Fatalf("RemoveVM of an unknown VM: %v, want NotFound", err)
		}
	})
}

// TestTeardownThatFails: a step that fails leaves the record Removing
// (gone for CRI, kept for the collector) and RemoveVM still succeeds; the
// next teardown finishes.
func TestTeardownThatFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*coretest.Env)
		mend   func(*coretest.Env)
	}{
		{"libvirtd down", func(e *coretest.Env) { e.Libvirt.SetDown(errUnavailable) }, func(e *coretest.Env) { e.Libvirt.SetDown(nil) }},
		{"undefine fails", func(e *coretest.Env) { e.Libvirt.Fail("Undefine", errUnavailable) }, func(*coretest.Env) {}},
		{"lookup fails", func(e *coretest.Env) { e.Libvirt.Fail("Lookup", errUnavailable) }, func(*coretest.Env) {}},
		{"destroy fails", func(e *coretest.Env) { e.Libvirt.Fail("Destroy", errUnavailable) }, func(*coretest.Env) {}},
		{"cgroup removal fails", func(e *coretest.Env) { e.Cgroups.Fail = errBoom }, func(e *coretest.Env) { e.Cgroups.Fail = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := coretest.New(t)
			c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
			tc.break_(e)
			if err := e.R.RemoveVM(context.Background(), "c1"); err != nil {
				t.Fatalf("RemoveVM with the teardown failing: %v, want success (the collector retries)", err)
			}
			rec := record(t, e, "c1")
			if !rec.Removing {
				t.Fatal("record not marked Removing")
			}
			if _, err := e.R.Store.Container("c1"); !errdefs.IsNotFound(err) {
				t.Fatalf("a VM being removed is visible: %v", err)
			}
			if !exists(c.Dir) {
				t.Fatal("VM dir removed before the domain was confirmed gone")
			}
			tc.mend(e)
			if err := e.R.Teardown(rec); err != nil {
				t.Fatal(err)
			}
			if e.Record(t, "c1") != nil || exists(c.Dir) {
				t.Fatal("second teardown left the record or the dir")
			}
			if _, ok := e.Libvirt.Domain("crimux-c1"); ok {
				t.Fatal("second teardown left the domain")
			}
		})
	}
}

// TestTeardownOfAnAdoptedVM: a VM adopted without a cgroup parent has no
// cgroup to remove.
func TestTeardownOfAnAdoptedVM(t *testing.T) {
	e := coretest.New(t)
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	c.CgroupParent = ""
	e.Cgroups.Fail = errBoom
	if err := e.R.Teardown(c); err != nil {
		t.Fatalf("teardown of a VM without cgroup parent: %v", err)
	}
}

func TestDestroyAndUndefine(t *testing.T) {
	const name = "crimux-c1"
	for _, tc := range []struct {
		name    string
		state   virt.State
		setup   func(*virtfake.Libvirt)
		wrap    func(*virtfake.Libvirt) virt.Libvirt
		wantErr bool
		gone    bool
	}{
		{name: "running", state: virt.StateRunning, gone: true},
		{name: "paused", state: virt.StatePaused, gone: true},
		{name: "shut off", state: virt.StateShutoff, gone: true},
		{name: "missing", setup: func(f *virtfake.Libvirt) {
			f.Edit(name, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
			_ = f.Undefine(virt.Domain{Name: name})
		}, gone: true},
		{name: "lookup fails", state: virt.StateShutoff, setup: func(f *virtfake.Libvirt) { f.Fail("Lookup", errUnavailable) }, wantErr: true},
		{name: "destroy fails, qemu gone anyway", state: virt.StateRunning, wrap: func(f *virtfake.Libvirt) virt.Libvirt { return destroyFails{f, true} }, gone: true},
		{name: "destroy fails, qemu runs", state: virt.StateRunning, wrap: func(f *virtfake.Libvirt) virt.Libvirt { return destroyFails{f, false} }, wantErr: true},
		{name: "destroy finds it gone", state: virt.StateRunning, setup: func(f *virtfake.Libvirt) {
			f.Fail("Destroy", errdefs.ErrNotFound)
			f.Fail("Undefine", errdefs.ErrNotFound)
		}},
		{name: "undefine fails", state: virt.StateShutoff, setup: func(f *virtfake.Libvirt) { f.Fail("Undefine", errBoom) }, wantErr: true},
		{name: "state unknown: undefine tried", state: virt.StateShutoff, setup: func(f *virtfake.Libvirt) { f.Fail("State", errBoom) }, gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := virtfake.New()
			f.Put(name, virtfake.Domain{State: tc.state})
			if tc.setup != nil {
				tc.setup(f)
			}
			var l virt.Libvirt = f
			if tc.wrap != nil {
				l = tc.wrap(f)
			}
			err := core.DestroyAndUndefine(l, name)
			if (err != nil) != tc.wantErr {
				t.Fatalf("DestroyAndUndefine: %v, want error %v", err, tc.wantErr)
			}
			if _, ok := f.Domain(name); tc.gone && ok {
				t.Fatal("domain left")
			}
		})
	}
}

// TestLockContainerReloads: a call waiting for the pod's lock sees what
// the holder did: here, the VM removed meanwhile.
func TestLockContainerReloads(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	unlock := e.R.Locks.Lock("sb1")
	errc := make(chan error, 1)
	go func() {
		_, unlock, err := e.R.LockContainer("c1")
		if err == nil {
			unlock()
		}
		errc <- err
	}()
	coretest.WaitFor(t, "LockContainer to wait for the pod's lock", func() bool { return e.R.LockWaiters("sb1") == 2 })
	if err := e.R.Store.DeleteContainer("c1"); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-errc; !errdefs.IsNotFound(err) {
		t.Fatalf("LockContainer of a VM removed while it waited: %v, want NotFound", err)
	}
	if _, _, err := e.R.LockContainer("c1"); !errdefs.IsNotFound(err) {
		t.Fatalf("LockContainer of a removed VM: %v, want NotFound", err)
	}
}
