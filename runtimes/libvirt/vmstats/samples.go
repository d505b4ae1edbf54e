package vmstats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// VMSamples reads each VM's figures for metrics: its names, power state,
// and while its qemu runs its cgroup's CPU and memory, its guest's own
// account of its memory and its disk and network traffic. A figure that
// cannot be read now (libvirtd away, the VM just gone) is left at zero:
// a scrape never fails for one VM.
func (m *Meter) VMSamples() ([]vmtypes.VMSample, error) {
	recs, err := m.Store.LiveContainers()
	if err != nil {
		return nil, err
	}
	l, _ := m.Conn.Get()
	out := make([]vmtypes.VMSample, 0, len(recs))
	for _, c := range recs {
		s := vmtypes.VMSample{Container: c.Config.GetMetadata().GetName(), PowerState: countedPowerState(l, c)}
		if sb, err := m.Store.Sandbox(c.SandboxID); err == nil {
			s.Namespace, s.Pod = sb.Config.GetMetadata().GetNamespace(), sb.Config.GetMetadata().GetName()
		}
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && (s.PowerState == "running" || s.PowerState == "paused") {
			m.sampleRunning(l, c, &s)
		}
		out = append(out, s)
	}
	return out, nil
}

// sampleRunning fills the figures of a VM whose qemu runs.
func (m *Meter) sampleRunning(l virt.Libvirt, c *store.Container, s *vmtypes.VMSample) {
	s.Running = true
	if u, err := m.cgroup(c); err == nil {
		s.CPUSeconds, s.MemoryBytes = float64(u.CPUNanos)/1e9, u.WorkingSetBytes
	}
	if l == nil {
		return
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return
	}
	s.GuestMemoryBytes, _ = guestInUse(l, dom)
	if io, err := l.IO(dom); err == nil {
		s.BlockReadBytes, s.BlockWriteBytes, s.NetReceiveBytes, s.NetSendBytes = io.BlockReadBytes, io.BlockWriteBytes, io.NetReceiveBytes, io.NetSendBytes
	}
}
