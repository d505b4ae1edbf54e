package vmstats

import (
	"fmt"
	"maps"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestPowerStateCounts: a running container counts by its domain's real
// state; a created or exited one as not_running; unknown when libvirt
// cannot say.
func TestPowerStateCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		state  runtimeapi.ContainerState
		power  vmtypes.PowerState
		domain func(*virtfake.Domain) // nil: as PutVM defines it
		gone   bool                   // libvirt has no such domain
		want   string
	}{
		{name: "running", state: running, power: vmtypes.PowerRunning, want: "running"},
		{name: "blocked", state: running, domain: func(d *virtfake.Domain) { d.State = virt.StateBlocked }, want: "running"},
		{name: "paused", state: running, power: vmtypes.PowerPaused, want: "paused"},
		{name: "pmsuspended", state: running, domain: func(d *virtfake.Domain) { d.State = virt.StatePMSuspended }, want: "paused"},
		{name: "shut down", state: running, power: vmtypes.PowerShutdown, want: "shutdown"},
		{name: "shutting down", state: running, domain: func(d *virtfake.Domain) { d.State = virt.StateShutdown }, want: "shutdown"},
		{name: "crashed", state: running, domain: func(d *virtfake.Domain) { d.State = virt.StateCrashed }, want: "shutdown"},
		{name: "hibernated", state: running, power: vmtypes.PowerHibernate, want: "hibernate"},
		{name: "no state", state: running, domain: func(d *virtfake.Domain) { d.State = virt.StateNoState }, want: "unknown"},
		{name: "domain gone", state: running, gone: true, want: "unknown"},
		{name: "created", state: runtimeapi.ContainerState_CONTAINER_CREATED, want: "not_running"},
		{name: "exited", state: runtimeapi.ContainerState_CONTAINER_EXITED, power: vmtypes.PowerShutdown, want: "not_running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.PutVM(t, "sb1", "c1", tc.state, tc.power)
			if tc.domain != nil {
				e.Libvirt.Edit(c.Domain, tc.domain)
			}
			if tc.gone {
				e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
				if err := e.Libvirt.Undefine(virt.Domain{Name: c.Domain}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := e.meter.PowerStateCounts()
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{tc.want: 1}; !maps.Equal(got, want) {
				t.Fatalf("PowerStateCounts = %v, want %v", got, want)
			}
		})
	}
}

// TestPowerStateCountsAll: the counts add up over many VMs; with
// libvirtd down every running one is unknown; a failing call makes its
// VM unknown.
func TestPowerStateCountsAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, p := range []vmtypes.PowerState{vmtypes.PowerRunning, vmtypes.PowerRunning, vmtypes.PowerPaused, vmtypes.PowerShutdown, vmtypes.PowerHibernate} {
		e.PutVM(t, fmt.Sprint("sb", i), fmt.Sprint("c", i), running, p)
	}
	e.PutVM(t, "sbx", "cx", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	got, err := e.meter.PowerStateCounts()
	want := map[string]int{"running": 2, "paused": 1, "shutdown": 1, "hibernate": 1, "not_running": 1}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("PowerStateCounts = %v, %v; want %v", got, err, want)
	}

	// A VM being removed is no longer counted; a managed save that
	// cannot be told is unknown, not shut down.
	gone := e.PutVM(t, "sbr", "cr", running, vmtypes.PowerRunning)
	gone.Removing = true
	if err := e.R.Store.PutContainer(gone); err != nil {
		t.Fatal(err)
	}
	e.Libvirt.Fail("HasManagedSave", boom)
	got, _ = e.meter.PowerStateCounts()
	want = map[string]int{"running": 2, "paused": 1, "unknown": 1, "hibernate": 1, "not_running": 1}
	if got["unknown"]+got["shutdown"]+got["hibernate"] != 2 || got["unknown"] != 1 || got["running"] != 2 {
		t.Fatalf("with a managed save unknown and a VM being removed: %v, want one unknown of the two shut off, %v", got, want)
	}

	e.Libvirt.Fail("State", boom)
	got, _ = e.meter.PowerStateCounts()
	if got["unknown"] != 1 || got["running"]+got["paused"]+got["shutdown"]+got["hibernate"] != 4 {
		t.Fatalf("with one State failing: %v, want one unknown", got)
	}

	e.Libvirt.SetDown(fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable))
	got, err = e.meter.PowerStateCounts()
	want = map[string]int{"unknown": 5, "not_running": 1}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("PowerStateCounts with libvirtd down = %v, %v; want %v", got, err, want)
	}
}
