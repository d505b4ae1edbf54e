package criservice

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// ContainerStats reports the VM's CPU and memory from its cgroup: qemu's
// real usage, guest and emulation together.
func (r *Service) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := r.Store.Container(req.GetContainerId())
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
func (r *Service) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	recs, err := r.Store.LiveContainers()
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

func (r *Service) stats(c *store.Container) (*runtimeapi.ContainerStats, error) {
	now := time.Now().UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.Config.GetMetadata(),
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations()},
		Cpu:           &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}},
		Memory:        &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{}},
		WritableLayer: r.writableLayer(c, now),
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.Power().GuestOff() {
		return st, nil
	}
	u, err := r.Cgroups.Stats(r.CgroupOf(c))
	if err != nil {
		return nil, fmt.Errorf("stats of %s: %w", c.Domain, err)
	}
	// UsageBytes too: kubelet refuses to lower a memory limit (in-place
	// resize) without the container's usage to compare it with.
	st.Cpu.UsageCoreNanoSeconds.Value = u.CPUNanos
	st.Memory.WorkingSetBytes.Value, st.Memory.UsageBytes.Value = u.WorkingSetBytes, u.MemoryBytes
	return st, nil
}

func matchPodStats(f *runtimeapi.PodSandboxStatsFilter, sb *runtimeapi.PodSandbox) bool {
	return crifilter.Sandbox(&runtimeapi.PodSandboxFilter{Id: f.Id, LabelSelector: f.LabelSelector}, sb)
}

// PodSandboxStats reports the pod's VM.
func (r *Service) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := r.Store.LiveSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: r.podStats(sb)}, nil
}

// ListPodSandboxStats reports every VM pod that matches.
func (r *Service) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	recs, err := r.Store.LiveSandboxes()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	var out []*runtimeapi.PodSandboxStats
	for _, sb := range recs {
		item := &runtimeapi.PodSandbox{Id: sb.ID, Labels: sb.Config.GetLabels()}
		if f != nil && !matchPodStats(f, item) {
			continue
		}
		out = append(out, r.podStats(sb))
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

func (r *Service) podStats(sb *store.Sandbox) *runtimeapi.PodSandboxStats {
	st := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.ID, Metadata: sb.Config.GetMetadata(),
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations()},
		Linux: &runtimeapi.LinuxPodSandboxStats{},
	}
	if sb.ContainerID == "" {
		return st
	}
	if c, err := r.Store.Container(sb.ContainerID); err == nil {
		if cs, err := r.stats(c); err == nil {
			st.Linux.Cpu, st.Linux.Memory = cs.Cpu, cs.Memory
			st.Linux.Containers = []*runtimeapi.ContainerStats{cs}
		}
	}
	return st
}

// writableLayer is the VM's overlay disk as kubelet's eviction sees a
// container's writable layer: the bytes the guest has written (allocated
// on the host), on the state dir's filesystem.
func (r *Service) writableLayer(c *store.Container, now int64) *runtimeapi.FilesystemUsage {
	var used, inodes uint64
	if fi, err := os.Lstat(r.DiskPathOf(c)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			used, inodes = uint64(st.Blocks)*512, 1
		}
	}
	return &runtimeapi.FilesystemUsage{Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: r.Opts.StateDir},
		UsedBytes: &runtimeapi.UInt64Value{Value: used}, InodesUsed: &runtimeapi.UInt64Value{Value: inodes}}
}
