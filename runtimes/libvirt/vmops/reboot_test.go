package vmops

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestRebootVM: a guest that obeys reboots softly (libvirt's reboot event
// arrives, no reset); one that ignores the request is reset after the
// timeout; a hard reboot resets at once; a refused request resets.
func TestRebootVM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		hard     bool
		ignores  bool
		timeout  time.Duration
		fail     string // a libvirt method that fails once
		want     vmtypes.RebootResult
		reboots  int // soft reboot requests
		resets   int
		minDelay time.Duration
	}{
		{name: "soft", timeout: 0, want: vmtypes.RebootResult{}, reboots: 1},
		{name: "soft by a guest that ignores it", ignores: true, timeout: 30 * time.Millisecond,
			want: vmtypes.RebootResult{Hard: true, SoftTimedOut: true}, reboots: 1, resets: 1, minDelay: 30 * time.Millisecond},
		{name: "soft refused by libvirt", fail: "Reboot", timeout: time.Minute,
			want: vmtypes.RebootResult{Hard: true, SoftTimedOut: true}, reboots: 1, resets: 1},
		{name: "hard", hard: true, want: vmtypes.RebootResult{Hard: true}, resets: 1},
		{name: "hard, guest ignores ACPI", hard: true, ignores: true, want: vmtypes.RebootResult{Hard: true}, resets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.vm(t, running, vmtypes.PowerRunning)
			e.followReboots(t)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = tc.ignores })
			if tc.fail != "" {
				e.Libvirt.Fail(tc.fail, boom)
			}
			start := time.Now()
			got, err := e.ops.RebootVM(context.Background(), "sb1", tc.hard, tc.timeout)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("RebootVM = %+v, want %+v", got, tc.want)
			}
			if took := time.Since(start); took < tc.minDelay {
				t.Errorf("reset after %v, before the %v timeout", took, tc.minDelay)
			}
			if n := e.Libvirt.Calls("Reboot"); n != tc.reboots {
				t.Errorf("Reboot called %d times, want %d", n, tc.reboots)
			}
			if n := e.Libvirt.Calls("Reset"); n != tc.resets {
				t.Errorf("Reset called %d times, want %d", n, tc.resets)
			}
			if d := e.domain(t, c); d.State != virt.StateRunning {
				t.Errorf("domain %v after a reboot, want running", d.State)
			}
			if rec := e.record(t, "c1"); rec.State != running || rec.Power() != vmtypes.PowerRunning {
				t.Errorf("record %s/%s after a reboot, want RUNNING/Running", rec.State, rec.Power())
			}
		})
	}
}

// TestRebootVMRefusals: what is refused, and what fails.
func TestRebootVMRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		setup    func(*testing.T, *env)
		noFollow bool
		ctx      func() context.Context
		hard     bool
		code     codes.Code
		words    string
		resets   int
		want     vmtypes.RebootResult
	}{
		{name: "unknown", setup: func(*testing.T, *env) {}, code: codes.NotFound, words: `"nope"`},
		{name: "paused", setup: func(t *testing.T, e *env) { e.vm(t, running, vmtypes.PowerPaused) },
			code: codes.FailedPrecondition, words: "the VM is Paused (domain paused)"},
		{name: "shut down", setup: func(t *testing.T, e *env) { e.vm(t, running, vmtypes.PowerShutdown) }, hard: true,
			code: codes.FailedPrecondition, words: "the VM is Shutdown (domain shutoff)"},
		{name: "hibernated", setup: func(t *testing.T, e *env) { e.vm(t, running, vmtypes.PowerHibernate) },
			code: codes.FailedPrecondition, words: "power it Running first"},
		{name: "recorded paused, domain running", setup: func(t *testing.T, e *env) {
			c := e.vm(t, running, vmtypes.PowerPaused)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StateRunning })
		}, code: codes.FailedPrecondition, words: "the VM is Paused (domain running)"},
		{name: "domain paused behind crimux's back", setup: func(t *testing.T, e *env) {
			c := e.vm(t, running, vmtypes.PowerRunning)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StatePaused })
		}, hard: true, code: codes.FailedPrecondition, words: "domain paused"},
		{name: "exited", setup: func(t *testing.T, e *env) { e.vm(t, runtimeapi.ContainerState_CONTAINER_EXITED, "") },
			code: codes.FailedPrecondition, words: "CONTAINER_EXITED"},
		{name: "reboot events not followed", noFollow: true, setup: func(t *testing.T, e *env) { e.vm(t, running, "") },
			code: codes.Unavailable, words: "reboot events are not followed"},
		{name: "reset fails", setup: func(t *testing.T, e *env) {
			e.vm(t, running, "")
			e.Libvirt.Fail("Reset", boom)
		}, hard: true, code: codes.Unknown, words: "reset domain crimux-c1: libvirt: internal error: boom", resets: 1,
			want: vmtypes.RebootResult{Hard: true}},
		{name: "caller gives up", setup: func(t *testing.T, e *env) {
			c := e.vm(t, running, "")
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = true })
		}, ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, code: codes.Canceled, words: "canceled"},
		{name: "libvirtd goes away", setup: func(t *testing.T, e *env) {
			c := e.vm(t, running, "")
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = true })
			e.Libvirt.Disconnect()
		}, code: codes.Unavailable, words: "connection lost while waiting for VM crimux-c1 to reboot"},
		{name: "libvirtd down", setup: func(t *testing.T, e *env) {
			e.vm(t, running, "")
			e.Libvirt.SetDown(fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable))
		}, code: codes.Unavailable, words: "libvirtd down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if !tc.noFollow {
				e.followReboots(t)
			}
			tc.setup(t, e)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			id := "c1"
			if tc.name == "unknown" {
				id = "nope"
			}
			// A long timeout: none of these may wait for it.
			got, err := e.ops.RebootVM(ctx, id, tc.hard, time.Minute)
			wantCode(t, err, tc.code, tc.words)
			if got != tc.want {
				t.Errorf("RebootVM = %+v, want %+v", got, tc.want)
			}
			if n := e.Libvirt.Calls("Reset"); n != tc.resets {
				t.Errorf("Reset called %d times, want %d", n, tc.resets)
			}
		})
	}
}
