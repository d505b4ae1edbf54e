package resize

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// Resizer resizes VMs in place.
type Resizer struct {
	Core
	// PlugWait bounds a resize's wait for the guest's memory plug; 0 is
	// defaultPlugWait (tests shorten it).
	PlugWait time.Duration
}

// New returns a Resizer on the runtime's core r.
func New(r Core) *Resizer { return &Resizer{Core: r} }

// Resize makes VM id the size linux asks, merged with the resources it
// has (a field at its zero value keeps its value, as in containerd:
// kubelet's CPU manager sends the cpuset alone): the VM's cgroup follows
// the new limits, and so does the guest — vCPUs hot-plugged or
// unplugged, RAM plugged or unplugged through its virtio-mem device, the
// new size in the record (and so in crimuxctl vm get) and in the domain's
// definition for its next boot. vCPUs come from the CPU limit (else the
// request), RAM from the memory limit. A size outside what the VM was
// created able to take (its boot RAM up to libvirt.max_memory_mib,
// libvirt.max_vcpus) is InvalidArgument naming the field; a guest that
// does not take it (no virtio-mem driver, memory in use), or a VM its
// user keeps paused, shut down or hibernated, is FailedPrecondition, and
// nothing changes.
func (r *Resizer) Resize(ctx context.Context, id string, linux *runtimeapi.LinuxContainerResources) error {
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return err
	}
	defer unlock()
	if linux == nil {
		return errdefs.Invalid("linux", "must be set for a VM")
	}
	res := mergeResources(c.Config.GetLinux().GetResources(), linux)
	want, err := resizeTarget(c, res)
	if err != nil {
		return err
	}
	next := *c
	next.Config = cloneConfigWith(c.Config, res)
	next.VCPUs, next.MemoryMiB = want.VCPUs, want.MemoryMiB
	if err := r.resizeVM(ctx, c, &next); err != nil {
		return err
	}
	return r.Store.PutContainer(&next)
}

// minResizableMemoryMiB is the least RAM a VM boots with for it to get
// room to grow it (a NUMA cell and a virtio-mem device). That layout
// costs the guest kernel boot memory: Debian's cloud kernel with the
// test bed's busybox initramfs panicked "System is deadlocked on memory"
// in 128 MiB with it and booted without it; 192 MiB booted with it.
const minResizableMemoryMiB = 256

// Headroom is how far a new VM of res can be resized while it runs
// (opts' MaxVCPUs and MaxMemoryMiB bound it): vCPUs always, RAM from
// minResizableMemoryMiB, unless it is huge pages (kubelet resizes no huge
// page limit).
func Headroom(opts *core.Options, res vm.Resources) (maxVCPUs uint, maxMemoryMiB uint64) {
	maxVCPUs = uint(opts.MaxVCPUs)
	if maxVCPUs == 0 {
		maxVCPUs = uint(runtime.NumCPU())
	}
	maxVCPUs = min(max(maxVCPUs, res.VCPUs), vm.MaxVCPUs)
	if res.MemoryMiB < minResizableMemoryMiB || res.HugePages.PageKiB != 0 {
		return maxVCPUs, res.MemoryMiB
	}
	maxMemoryMiB = uint64(max(opts.MaxMemoryMiB, 0))
	if maxMemoryMiB == 0 {
		maxMemoryMiB = 2 * res.MemoryMiB
	}
	return maxVCPUs, max(maxMemoryMiB, res.MemoryMiB)
}

// resizeTarget is the size res asks of c, checked against the room c was
// created with.
func resizeTarget(c *store.Container, res *runtimeapi.LinuxContainerResources) (vm.Resources, error) {
	want := vm.Resources{VCPUs: c.VCPUs, MemoryMiB: c.MemoryMiB}
	switch {
	case res.GetCpuQuota() > 0 && res.GetCpuPeriod() > 0:
		want.VCPUs = uint(math.Ceil(float64(res.CpuQuota) / float64(res.CpuPeriod)))
	case res.GetCpuShares() > 2:
		want.VCPUs = uint(math.Ceil(float64(res.CpuShares) / 1024))
	}
	if maxV := max(c.MaxVCPUs, c.VCPUs); want.VCPUs > maxV {
		return want, errdefs.Invalid("linux.cpu_quota", "asks for %d vCPUs; VM %s can have at most %d (libvirt.max_vcpus when it was created)",
			want.VCPUs, c.ID, maxV)
	}
	if hp, _ := vm.HugePagesFrom(c.Config.GetLinux().GetResources()); hp.PageKiB != 0 {
		return want, nil // the memory limit is qemu's; the guest's RAM stays
	}
	if lim := res.GetMemoryLimitInBytes(); lim > 0 {
		want.MemoryMiB = uint64(lim) >> 20
	}
	boot, maxM := bootMemory(c), max(c.MaxMemoryMiB, c.MemoryMiB)
	maxM -= (maxM - boot) % vm.MemoryBlockMiB // the device holds whole blocks
	switch {
	case want.MemoryMiB < boot:
		return want, errdefs.Invalid("linux.memory_limit_in_bytes", "%d MiB is below the %d MiB VM %s booted with: its RAM grows and shrinks back, never below that",
			want.MemoryMiB, boot, c.ID)
	case want.MemoryMiB > maxM:
		return want, errdefs.Invalid("linux.memory_limit_in_bytes", "%d MiB is above the %d MiB VM %s can grow to (libvirt.max_memory_mib when it was created)",
			want.MemoryMiB, maxM, c.ID)
	}
	// virtio-mem plugs whole blocks.
	want.MemoryMiB = boot + roundUp(want.MemoryMiB-boot, vm.MemoryBlockMiB)
	return want, nil
}

func bootMemory(c *store.Container) uint64 {
	if c.BootMemoryMiB == 0 {
		return c.MemoryMiB // an older record: no virtio-mem device
	}
	return c.BootMemoryMiB
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// cloneConfigWith is cfg with res as its Linux resources (the stored
// config is not changed until the resize is done).
func cloneConfigWith(cfg *runtimeapi.ContainerConfig, res *runtimeapi.LinuxContainerResources) *runtimeapi.ContainerConfig {
	out := &runtimeapi.ContainerConfig{}
	if cfg != nil {
		out = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	}
	if out.Linux == nil {
		out.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	out.Linux.Resources = res
	return out
}

// resizeVM makes the VM of c the size of next: its cgroup, its domain
// (live when it runs) and its guest. On error nothing is left changed.
func (r *Resizer) resizeVM(ctx context.Context, c, next *store.Container) error {
	running := c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	sized := next.VCPUs != c.VCPUs || next.MemoryMiB != c.MemoryMiB
	if running && sized && c.Power() != vmtypes.PowerRunning {
		return fmt.Errorf("VM %s is %s: resize it once it runs again (crimux.io/power-state Running, or crimuxctl vm power %s Running): %w",
			c.ID, c.Power(), c.ID, errdefs.ErrFailedPrecondition)
	}
	grow := next.MemoryMiB > c.MemoryMiB
	if running && grow { // room in the cgroup before the guest gets the RAM
		if err := r.Cgroups.Update(r.CgroupOf(next)); err != nil {
			return err
		}
	}
	if sized && c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		if err := r.resizeDomain(ctx, c, next, running); err != nil {
			if running && grow {
				r.restoreCgroup(c)
			}
			return err
		}
	}
	if running && !grow { // the guest gave back what it had, or nothing changed
		return r.Cgroups.Update(r.CgroupOf(next))
	}
	return nil
}

func (r *Resizer) restoreCgroup(c *store.Container) {
	if err := r.Cgroups.Update(r.CgroupOf(c)); err != nil {
		r.Log.Warn("VM cgroup not restored after a failed resize", "container", c.ID, "err", err)
	}
}
