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
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// ContainerStats reports the VM's CPU from its cgroup (qemu's real usage,
// guest and emulation together) and its memory as the guest accounts for
// it when its balloon driver reports (guestMemory): kubelet lowers a
// memory limit (in-place resize) only above the container's usage, and a
// guest's page cache is RAM it gives back when asked. The pod's figures
// stay the cgroup's (PodSandboxStats).
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
	host, err := r.hostStats(c)
	if err != nil {
		return nil, err
	}
	return r.withGuestMemory(c, host), nil
}

// withGuestMemory is host with the guest's account of its memory in
// place of the cgroup's, when a running guest gives one.
func (r *Service) withGuestMemory(c *store.Container, host *runtimeapi.ContainerStats) *runtimeapi.ContainerStats {
	if !qemuRuns(c) {
		return host
	}
	g, ok := r.guestMemory(c)
	if !ok {
		return host
	}
	inUse := &runtimeapi.UInt64Value{Value: g.InUseBytes()}
	return &runtimeapi.ContainerStats{Attributes: host.Attributes, Cpu: host.Cpu, WritableLayer: host.WritableLayer,
		Memory: &runtimeapi.MemoryUsage{Timestamp: host.Memory.Timestamp, WorkingSetBytes: inUse, UsageBytes: inUse}}
}

func qemuRuns(c *store.Container) bool {
	return c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && !c.Power().GuestOff()
}

// hostStats is the VM as the node pays for it: CPU and memory from its
// cgroup (zeros while no qemu runs).
func (r *Service) hostStats(c *store.Container) (*runtimeapi.ContainerStats, error) {
	now := time.Now().UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.Config.GetMetadata(),
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations()},
		Cpu:           &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}},
		Memory:        &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{}},
		WritableLayer: r.writableLayer(c, now),
	}
	if !qemuRuns(c) {
		return st, nil
	}
	u, err := r.Cgroups.Stats(r.CgroupOf(c))
	if err != nil {
		return nil, fmt.Errorf("stats of %s: %w", c.Domain, err)
	}
	st.Cpu.UsageCoreNanoSeconds.Value = u.CPUNanos
	st.Memory.WorkingSetBytes.Value, st.Memory.UsageBytes.Value = u.WorkingSetBytes, u.MemoryBytes
	return st, nil
}

// guestMemory is what the VM's guest last reported of its RAM; none
// (ok false) without a balloon driver, or when libvirt cannot tell at
// once. The guest writes it: it only decides whether kubelet tries to
// lower the limit. The resize itself then asks the guest to unplug, and
// the cgroup follows only what it gave back (package resize).
func (r *Service) guestMemory(c *store.Container) (virt.GuestMemory, bool) {
	l, err := r.Conn.Get()
	if err != nil {
		return virt.GuestMemory{}, false
	}
	d, err := l.Lookup(c.Domain)
	if err != nil {
		return virt.GuestMemory{}, false
	}
	g, ok, err := l.GuestMemory(d)
	return g, ok && err == nil
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
		host, err := r.hostStats(c)
		if err != nil {
			return st
		}
		st.Linux.Cpu, st.Linux.Memory = host.Cpu, host.Memory
		st.Linux.Containers = []*runtimeapi.ContainerStats{r.withGuestMemory(c, host)}
	}
	return st
}

// writableLayer is the VM's overlay disk as kubelet's eviction sees a
// container's writable layer: the bytes the guest has written (allocated
// on the host), on the state dir's filesystem; none for a VM whose root
// disk is on a volume.
func (r *Service) writableLayer(c *store.Container, now int64) *runtimeapi.FilesystemUsage {
	var used, inodes uint64
	if c.RootVolume != nil {
		// The volume's, not the state dir's: kubelet counts the volume.
	} else if fi, err := os.Lstat(vmfiles.DiskPathOf(r.Store, c)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			used, inodes = uint64(st.Blocks)*512, 1
		}
	}
	return &runtimeapi.FilesystemUsage{Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: r.Opts.StateDir},
		UsedBytes: &runtimeapi.UInt64Value{Value: used}, InodesUsed: &runtimeapi.UInt64Value{Value: inodes}}
}
