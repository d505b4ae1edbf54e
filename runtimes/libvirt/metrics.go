package libvirt

import (
	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// countGC counts what a collector pass removed, by kind.
func (r *Runtime) countGC(rep GCReport) {
	r.counters.GCRemoved("domain", rep.Domains)
	r.counters.GCRemoved("dir", rep.Dirs)
	r.counters.GCRemoved("record", rep.Records)
	r.counters.GCRemoved("network", rep.Networks)
}

// PowerStateCounts counts this runtime's VMs by power state for metrics
// (crimux_vms): a VM container that is CONTAINER_RUNNING counts by its
// domain's real state, "running", "paused", "shutdown" or "hibernate"
// (shut off with a managed save image), since a power state the user chose
// keeps the container running; a created or exited one as "not_running";
// "unknown" while libvirtd cannot be reached or the domain is missing.
func (r *Runtime) PowerStateCounts() (map[string]int, error) {
	recs, err := r.store.containers()
	if err != nil {
		return nil, err
	}
	l, _ := r.conn.get()
	counts := map[string]int{}
	for _, c := range recs {
		counts[countedPowerState(l, c)]++
	}
	return counts, nil
}

func countedPowerState(l *golibvirt.Libvirt, c *containerRecord) string {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "not_running"
	}
	if l == nil {
		return "unknown"
	}
	dom, err := l.DomainLookupByName(c.Domain)
	if err != nil {
		return "unknown"
	}
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return "unknown"
	}
	switch golibvirt.DomainState(state) {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return "running"
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return "paused"
	case golibvirt.DomainShutoff:
		if saved, err := l.DomainHasManagedSaveImage(dom, 0); err == nil && saved == 1 {
			return "hibernate"
		}
		return "shutdown"
	case golibvirt.DomainShutdown, golibvirt.DomainCrashed:
		return "shutdown"
	}
	return "unknown"
}
