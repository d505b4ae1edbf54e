package libvirt

import (
	"context"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/internal/errdefs"
)

// defaultCPUPeriod is the CFS period used when the container sets a quota
// without one.
const defaultCPUPeriod = 100000

// cgroupOf is the cgroup a VM's qemu runs in: a child of the pod's
// cgroup_parent named after the VM, limited to the container's CPU and
// memory, the memory limit raised by qemu's own overhead.
func (r *Runtime) cgroupOf(c *containerRecord) VMCgroup {
	res := c.Config.GetLinux().GetResources()
	cg := VMCgroup{
		Parent: c.CgroupParent, Name: c.Domain,
		CPUQuota: res.GetCpuQuota(), CPUPeriod: res.GetCpuPeriod(), CPUShares: uint64(res.GetCpuShares()),
		MemoryLimit: max(res.GetMemoryLimitInBytes(), int64(c.MemoryMiB<<20)) + r.opts.MemoryOverheadMiB<<20,
	}
	if cg.CPUQuota > 0 && cg.CPUPeriod == 0 {
		cg.CPUPeriod = defaultCPUPeriod
	}
	return cg
}

// ContainerStats reports the VM's CPU and memory from its cgroup: qemu's
// real usage, guest and emulation together.
func (r *Runtime) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := r.store.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, err := r.stats(c)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports every VM that matches the filter.
func (r *Runtime) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	recs, err := r.store.liveContainers()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	var out []*runtimeapi.ContainerStats
	for _, c := range recs {
		item := &runtimeapi.Container{Id: c.ID, PodSandboxId: c.SandboxID, Labels: c.Config.GetLabels()}
		if !matchStatsFilter(f, item) {
			continue
		}
		if st, err := r.stats(c); err == nil {
			out = append(out, st)
		}
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

func matchStatsFilter(f *runtimeapi.ContainerStatsFilter, c *runtimeapi.Container) bool {
	if f == nil {
		return true
	}
	return crifilter.Container(&runtimeapi.ContainerFilter{Id: f.Id, PodSandboxId: f.PodSandboxId, LabelSelector: f.LabelSelector}, c)
}

func (r *Runtime) stats(c *containerRecord) (*runtimeapi.ContainerStats, error) {
	now := time.Now().UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.Config.GetMetadata(),
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations()},
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}},
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.powerState().GuestOff() {
		return st, nil
	}
	cpu, mem, err := r.cgroups.Stats(r.cgroupOf(c))
	if err != nil {
		return nil, fmt.Errorf("stats of %s: %w", c.Domain, err)
	}
	st.Cpu.UsageCoreNanoSeconds.Value, st.Memory.WorkingSetBytes.Value = cpu, mem
	return st, nil
}

// UpdateContainerResources updates the VM's cgroup limits. The guest's
// vCPUs and RAM stay as they were booted: resizing a running guest is not
// done (yet), so raising a limit gives qemu headroom, not the guest more.
func (r *Runtime) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, unlock, err := r.lockContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	res := req.GetLinux()
	if res == nil {
		return nil, errdefs.Invalid("linux", "must be set for a VM")
	}
	if res.GetMemoryLimitInBytes() > 0 && res.GetMemoryLimitInBytes() < int64(c.MemoryMiB<<20) {
		return nil, errdefs.Invalid("linux.memory_limit_in_bytes", "%d is below the VM's RAM (%d MiB)", res.GetMemoryLimitInBytes(), c.MemoryMiB)
	}
	if c.Config.Linux == nil {
		c.Config.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	c.Config.Linux.Resources = res
	if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		if err := r.cgroups.Update(r.cgroupOf(c)); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, r.store.putContainer(c)
}

func matchPodStats(f *runtimeapi.PodSandboxStatsFilter, sb *runtimeapi.PodSandbox) bool {
	return crifilter.Sandbox(&runtimeapi.PodSandboxFilter{Id: f.Id, LabelSelector: f.LabelSelector}, sb)
}

// CgroupForDomain tells the qemu placement server which cgroup a domain's
// qemu belongs in; ok is false for a domain this runtime does not own.
func (r *Runtime) CgroupForDomain(domain string) (VMCgroup, bool) {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return VMCgroup{}, false
	}
	c, err := r.store.container(id)
	if err != nil {
		return VMCgroup{}, false
	}
	return r.cgroupOf(c), true
}
