package vmstats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// PowerStateCounts counts this runtime's VMs by power state for metrics
// (crimux_vms): a VM container that is CONTAINER_RUNNING counts by its
// domain's real state, "running", "paused", "shutdown" or "hibernate"
// (shut off with a managed save image), since a power state the user chose
// keeps the container running; a created or exited one as "not_running";
// "unknown" while libvirtd cannot be reached or the domain is missing.
func (m *Meter) PowerStateCounts() (map[string]int, error) {
	recs, err := m.Store.LiveContainers() // not those being made or removed
	if err != nil {
		return nil, err
	}
	l, _ := m.Conn.Get()
	counts := map[string]int{}
	for _, c := range recs {
		counts[countedPowerState(l, c)]++
	}
	return counts, nil
}

func countedPowerState(l virt.Libvirt, c *store.Container) string {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "not_running"
	}
	if l == nil {
		return "unknown"
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return "unknown"
	}
	state, err := l.State(dom)
	if err != nil {
		return "unknown"
	}
	switch state {
	case virt.StateRunning, virt.StateBlocked:
		return "running"
	case virt.StatePaused, virt.StatePMSuspended:
		return "paused"
	case virt.StateShutoff:
		switch saved, err := l.HasManagedSave(dom); {
		case err != nil:
			return "unknown"
		case saved:
			return "hibernate"
		}
		return "shutdown"
	case virt.StateShutdown, virt.StateCrashed:
		return "shutdown"
	}
	return "unknown"
}
