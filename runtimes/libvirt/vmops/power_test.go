package vmops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

var powerStates = []vmtypes.PowerState{vmtypes.PowerRunning, vmtypes.PowerPaused, vmtypes.PowerShutdown, vmtypes.PowerHibernate}

// powerMethods are the libvirt calls a power change may make.
var powerMethods = []string{"Suspend", "Resume", "Shutdown", "Destroy", "ManagedSave", "Start", "StartPaused"}

// TestSetPowerState moves a VM from each power state to each other
// through the fake libvirtd: the domain ends in the target (state and
// managed save), the record says so, the container stays running, and
// libvirt was asked exactly what the step needs. Two moves are refused.
func TestSetPowerState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to vmtypes.PowerState
		calls    []string // libvirt power calls, once each
		refuse   string
	}{
		{vmtypes.PowerRunning, vmtypes.PowerRunning, nil, ""},
		{vmtypes.PowerRunning, vmtypes.PowerPaused, []string{"Suspend"}, ""},
		{vmtypes.PowerRunning, vmtypes.PowerShutdown, []string{"Shutdown"}, ""},
		{vmtypes.PowerRunning, vmtypes.PowerHibernate, []string{"ManagedSave"}, ""},
		{vmtypes.PowerPaused, vmtypes.PowerRunning, []string{"Resume"}, ""},
		{vmtypes.PowerPaused, vmtypes.PowerPaused, nil, ""},
		{vmtypes.PowerPaused, vmtypes.PowerShutdown, []string{"Resume", "Shutdown"}, ""},
		{vmtypes.PowerPaused, vmtypes.PowerHibernate, []string{"ManagedSave"}, ""},
		{vmtypes.PowerShutdown, vmtypes.PowerRunning, []string{"Start"}, ""},
		{vmtypes.PowerShutdown, vmtypes.PowerPaused, []string{"StartPaused"}, ""},
		{vmtypes.PowerShutdown, vmtypes.PowerShutdown, nil, ""},
		{vmtypes.PowerShutdown, vmtypes.PowerHibernate, nil, "no memory to hibernate"},
		{vmtypes.PowerHibernate, vmtypes.PowerRunning, []string{"Start"}, ""},
		{vmtypes.PowerHibernate, vmtypes.PowerPaused, []string{"StartPaused"}, ""},
		{vmtypes.PowerHibernate, vmtypes.PowerShutdown, nil, "would discard its saved memory"},
		{vmtypes.PowerHibernate, vmtypes.PowerHibernate, nil, ""},
	} {
		t.Run(fmt.Sprintf("%s to %s", tc.from, tc.to), func(t *testing.T) {
			e := newEnv(t)
			c := e.vm(t, running, tc.from)
			before := e.domain(t, c)
			// Half by pod ID, half by container ID; grace 0 is the default.
			id := "c1"
			if len(tc.calls)%2 == 0 {
				id = "sb1"
			}
			got, err := e.ops.SetPowerState(context.Background(), id, tc.to, 0)
			rec := e.record(t, "c1")
			d := e.domain(t, c)
			if tc.refuse != "" {
				wantCode(t, err, codes.FailedPrecondition, tc.refuse)
				if got.Previous != tc.from || got.State != tc.from {
					t.Errorf("refused change = %+v, want previous and state %s", got, tc.from)
				}
				if rec.PowerState != tc.from || d.State != before.State || d.ManagedSave != before.ManagedSave {
					t.Errorf("a refused change touched something: record %s, domain %v (save %v)", rec.PowerState, d.State, d.ManagedSave)
				}
				for _, m := range powerMethods {
					if n := e.Libvirt.Calls(m); n != 0 {
						t.Errorf("a refused change called %s %d times", m, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != (vmtypes.PowerChange{Previous: tc.from, State: tc.to}) {
				t.Errorf("SetPowerState = %+v, want %s -> %s, not forced", got, tc.from, tc.to)
			}
			if p := powerOf(d); p != tc.to {
				t.Errorf("domain is %v (managed save %v): power %s, want %s", d.State, d.ManagedSave, p, tc.to)
			}
			if rec.PowerState != tc.to || rec.State != running || rec.Power() != tc.to {
				t.Errorf("record: power %s, state %s; want %s, RUNNING", rec.PowerState, rec.State, tc.to)
			}
			for _, m := range powerMethods {
				want := 0
				for _, c := range tc.calls {
					if c == m {
						want = 1
					}
				}
				if n := e.Libvirt.Calls(m); n != want {
					t.Errorf("%s called %d times, want %d", m, n, want)
				}
			}
		})
	}
}

// TestSetPowerStateForced: a guest that ignores the power button is
// forced off once the grace period is over.
func TestSetPowerStateForced(t *testing.T) {
	t.Parallel()
	for _, from := range []vmtypes.PowerState{vmtypes.PowerRunning, vmtypes.PowerPaused} {
		t.Run(string(from), func(t *testing.T) {
			e := newEnv(t)
			c := e.vm(t, running, from)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = true })
			start := time.Now()
			got, err := e.ops.SetPowerState(context.Background(), "c1", vmtypes.PowerShutdown, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if got != (vmtypes.PowerChange{Previous: from, State: vmtypes.PowerShutdown, Forced: true}) {
				t.Fatalf("SetPowerState = %+v, want forced to Shutdown", got)
			}
			if took := time.Since(start); took < 20*time.Millisecond {
				t.Fatalf("forced after %v, before the grace period", took)
			}
			if d := e.domain(t, c); d.State != virt.StateShutoff || e.Libvirt.Calls("Shutdown") != 1 || e.Libvirt.Calls("Destroy") != 1 {
				t.Fatalf("domain %v, Shutdown %d, Destroy %d; want shut off by one ACPI press and one destroy",
					d.State, e.Libvirt.Calls("Shutdown"), e.Libvirt.Calls("Destroy"))
			}
			if rec := e.record(t, "c1"); rec.PowerState != vmtypes.PowerShutdown {
				t.Fatalf("record power %s, want Shutdown", rec.PowerState)
			}
		})
	}
}

// TestSetPowerStateRefusals: what is refused before libvirt acts.
func TestSetPowerStateRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, *env)
		id    string
		state vmtypes.PowerState
		code  codes.Code
		words string
	}{
		{"invalid state", nil, "c1", "Sleeping", codes.InvalidArgument, `state: "Sleeping"`},
		{"empty state", nil, "c1", "", codes.InvalidArgument, "state"},
		{"lower case", nil, "c1", "running", codes.InvalidArgument, "state"},
		{"unknown ID", nil, "nope", vmtypes.PowerPaused, codes.NotFound, `"nope"`},
		{"created", func(t *testing.T, e *env) { e.vm(t, runtimeapi.ContainerState_CONTAINER_CREATED, "") },
			"c1", vmtypes.PowerRunning, codes.FailedPrecondition, "CONTAINER_CREATED, not CONTAINER_RUNNING"},
		{"exited", func(t *testing.T, e *env) { e.vm(t, runtimeapi.ContainerState_CONTAINER_EXITED, "") },
			"sb1", vmtypes.PowerShutdown, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"domain gone", func(t *testing.T, e *env) {
			c := e.vm(t, running, vmtypes.PowerRunning)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
			if err := e.Libvirt.Undefine(virt.Domain{Name: c.Domain}); err != nil {
				t.Fatal(err)
			}
		}, "c1", vmtypes.PowerPaused, codes.NotFound, "domain crimux-c1"},
		{"libvirtd down", func(t *testing.T, e *env) {
			e.vm(t, running, vmtypes.PowerRunning)
			e.Libvirt.SetDown(fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable))
		}, "c1", vmtypes.PowerPaused, codes.Unavailable, "libvirtd down"},
		{"crashed domain", func(t *testing.T, e *env) {
			c := e.vm(t, running, vmtypes.PowerRunning)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StateCrashed })
		}, "c1", vmtypes.PowerRunning, codes.FailedPrecondition, "domain is crashed"},
		{"state unreadable", func(t *testing.T, e *env) {
			e.vm(t, running, vmtypes.PowerRunning)
			e.Libvirt.Fail("State", boom)
		}, "c1", vmtypes.PowerPaused, codes.Unknown, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			_, err := e.ops.SetPowerState(ctx, tc.id, tc.state, 0)
			wantCode(t, err, tc.code, tc.words)
			for _, m := range powerMethods {
				if n := e.Libvirt.Calls(m); n != 0 {
					t.Errorf("a refused change called %s %d times", m, n)
				}
			}
			if c, err := e.R.Store.AnyContainer("c1"); err == nil && c.PowerState != "" && c.PowerState != vmtypes.PowerRunning {
				t.Errorf("a refused change recorded power %s", c.PowerState)
			}
		})
	}
}

// TestSetPowerStateFailingStep: when libvirt fails a step, the error says
// so and the power state is settled from what libvirt then reports (not
// the target recorded before the step), or kept when libvirt cannot say.
func TestSetPowerStateFailingStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		from, to  vmtypes.PowerState
		ignores   bool
		fail      map[string][]error
		wantState vmtypes.PowerState // recorded and returned
	}{
		{"managed save fails", vmtypes.PowerRunning, vmtypes.PowerHibernate, false,
			map[string][]error{"ManagedSave": {boom}}, vmtypes.PowerRunning},
		{"suspend fails", vmtypes.PowerRunning, vmtypes.PowerPaused, false,
			map[string][]error{"Suspend": {boom}}, vmtypes.PowerRunning},
		{"resume fails", vmtypes.PowerPaused, vmtypes.PowerRunning, false,
			map[string][]error{"Resume": {boom}}, vmtypes.PowerPaused},
		{"resume before shutdown fails", vmtypes.PowerPaused, vmtypes.PowerShutdown, false,
			map[string][]error{"Resume": {boom}}, vmtypes.PowerPaused},
		{"boot fails", vmtypes.PowerShutdown, vmtypes.PowerRunning, false,
			map[string][]error{"Start": {boom}}, vmtypes.PowerShutdown},
		{"restore paused fails", vmtypes.PowerHibernate, vmtypes.PowerPaused, false,
			map[string][]error{"StartPaused": {boom}}, vmtypes.PowerHibernate},
		{"forced off fails", vmtypes.PowerRunning, vmtypes.PowerShutdown, true,
			map[string][]error{"Destroy": {boom}}, vmtypes.PowerRunning},
		// The first State is BeginVMOp's, the second settlePower's.
		{"libvirt cannot say afterwards", vmtypes.PowerRunning, vmtypes.PowerHibernate, false,
			map[string][]error{"ManagedSave": {boom}, "State": {nil, boom}}, vmtypes.PowerRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.vm(t, running, tc.from)
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.IgnoresACPI = tc.ignores })
			for m, errs := range tc.fail {
				e.Libvirt.Fail(m, errs...)
			}
			got, err := e.ops.SetPowerState(context.Background(), "c1", tc.to, 10*time.Millisecond)
			if !errors.Is(err, boom) || errdefs.Code(err) != codes.Unknown {
				t.Fatalf("SetPowerState = %v, want the libvirt failure", err)
			}
			if got.Previous != tc.from || got.State != tc.wantState || got.Forced {
				t.Errorf("SetPowerState = %+v, want previous %s, state %s", got, tc.from, tc.wantState)
			}
			if rec := e.record(t, "c1"); rec.PowerState != tc.wantState || rec.State != running {
				t.Errorf("record power %s, state %s; want %s, RUNNING", rec.PowerState, rec.State, tc.wantState)
			}
			if p := powerOf(e.domain(t, c)); p != tc.from {
				t.Errorf("domain is %s, want it left %s", p, tc.from)
			}
		})
	}
}

// TestSetPowerStateSettlesFromLibvirt: the record follows what libvirt
// reports, not what it said before: a VM recorded Running whose domain
// was paused behind crimux's back is resumed, and reported as paused
// before.
func TestSetPowerStateSettlesFromLibvirt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.vm(t, running, vmtypes.PowerRunning)
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StatePaused })
	got, err := e.ops.SetPowerState(context.Background(), "c1", vmtypes.PowerRunning, 0)
	if err != nil || got != (vmtypes.PowerChange{Previous: vmtypes.PowerPaused, State: vmtypes.PowerRunning}) {
		t.Fatalf("SetPowerState = %+v, %v; want Paused -> Running", got, err)
	}
	if e.Libvirt.Calls("Resume") != 1 || e.domain(t, c).State != virt.StateRunning {
		t.Fatalf("domain %v after %d resumes", e.domain(t, c).State, e.Libvirt.Calls("Resume"))
	}
}

// TestSetPowerStateSerialises: concurrent changes of one VM run one at a
// time under its pod's lock: each sees the state the one before left, and
// the record ends matching the domain.
func TestSetPowerStateSerialises(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.vm(t, running, vmtypes.PowerRunning)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := []vmtypes.PowerState{vmtypes.PowerPaused, vmtypes.PowerRunning, vmtypes.PowerHibernate, vmtypes.PowerRunning}[i%4]
			if _, err := e.ops.SetPowerState(context.Background(), "sb1", target, 0); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if rec, d := e.record(t, "c1"), e.domain(t, c); rec.PowerState != powerOf(d) {
		t.Fatalf("record %s, domain %s", rec.PowerState, powerOf(d))
	}
}
