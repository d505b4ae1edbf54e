package criservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmstats"
)

// Meter is what the CRI face asks of the room that measures the VMs
// (package vmstats): a VM's figures or its pod's, one, or all those kept.
type Meter interface {
	Container(id string) (vmstats.VM, error)
	Containers(keep func(*store.Container) bool) ([]vmstats.VM, error)
	Pod(id string) (vmstats.Pod, error)
	Pods(keep func(*store.Sandbox) bool) ([]vmstats.Pod, error)
}

// ContainerStats reports the VM's CPU from its cgroup and its memory as
// the guest accounts for it when its balloon driver reports
// (vmstats.Usage.ContainerMemory); the pod's figures stay the cgroup's
// (PodSandboxStats).
func (r *Service) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	vm, err := r.Meter.Container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: containerStats(vm)}, nil
}

// ListContainerStats reports every VM that matches the filter.
func (r *Service) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	vms, err := r.Meter.Containers(func(c *store.Container) bool {
		return f == nil || crifilter.Container(&runtimeapi.ContainerFilter{Id: f.Id, PodSandboxId: f.PodSandboxId, LabelSelector: f.LabelSelector},
			&runtimeapi.Container{Id: c.ID, PodSandboxId: c.SandboxID, Labels: c.Config.GetLabels()})
	})
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.ContainerStats
	for _, vm := range vms {
		out = append(out, containerStats(vm))
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

// PodSandboxStats reports the pod's VM.
func (r *Service) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	p, err := r.Meter.Pod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: podStats(p)}, nil
}

// ListPodSandboxStats reports every VM pod that matches.
func (r *Service) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	pods, err := r.Meter.Pods(func(sb *store.Sandbox) bool {
		return f == nil || crifilter.Sandbox(&runtimeapi.PodSandboxFilter{Id: f.Id, LabelSelector: f.LabelSelector},
			&runtimeapi.PodSandbox{Id: sb.ID, Labels: sb.Config.GetLabels()})
	})
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.PodSandboxStats
	for _, p := range pods {
		out = append(out, podStats(p))
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

func containerStats(vm vmstats.VM) *runtimeapi.ContainerStats {
	c, u, d := vm.Rec, vm.Usage, vm.Disk
	ws, used := u.ContainerMemory()
	return &runtimeapi.ContainerStats{Cpu: cpuUsage(u), Memory: memoryUsage(u.At, ws, used),
		Attributes: &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.Config.GetMetadata(),
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations()},
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: u.At, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: d.Mountpoint},
			UsedBytes: &runtimeapi.UInt64Value{Value: d.UsedBytes}, InodesUsed: &runtimeapi.UInt64Value{Value: d.Inodes}}}
}

// podStats is the pod's VM as the node pays for it, its cgroup's.
func podStats(p vmstats.Pod) *runtimeapi.PodSandboxStats {
	sb := p.Rec
	st := &runtimeapi.PodSandboxStats{Linux: &runtimeapi.LinuxPodSandboxStats{},
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.ID, Metadata: sb.Config.GetMetadata(),
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations()}}
	if vm := p.VM; vm != nil {
		st.Linux.Cpu, st.Linux.Memory = cpuUsage(vm.Usage), memoryUsage(vm.At, vm.Cgroup.WorkingSetBytes, vm.Cgroup.MemoryBytes)
		st.Linux.Containers = []*runtimeapi.ContainerStats{containerStats(*vm)}
	}
	return st
}

func cpuUsage(u vmstats.Usage) *runtimeapi.CpuUsage {
	return &runtimeapi.CpuUsage{Timestamp: u.At, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: u.Cgroup.CPUNanos}}
}

func memoryUsage(at int64, workingSet, usage uint64) *runtimeapi.MemoryUsage {
	return &runtimeapi.MemoryUsage{Timestamp: at, WorkingSetBytes: &runtimeapi.UInt64Value{Value: workingSet},
		UsageBytes: &runtimeapi.UInt64Value{Value: usage}}
}
