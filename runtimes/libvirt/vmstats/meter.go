// Package vmstats measures the VMs: what each uses as the node pays for
// it (its cgroup's CPU and memory), what its guest reports of its RAM
// (virtio-balloon), what its overlay disk takes and what it moved on its
// disks and NICs. Kubelet's stats take a VM's figures as a neutral Usage
// (Meter.Container, Meter.Pod; the CRI face makes them CRI messages,
// criservice.Meter); crimux's metrics take each VM's sample
// (vmtypes.Sampler) and the VMs counted by power state.
package vmstats

import (
	"fmt"
	"os"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// Core is what a Meter uses of the VM runtime's core: its options (the
// state dir), store, libvirt and cgroups, and where a VM's cgroup is.
type Core struct {
	vms
	Opts    *core.Options
	Store   *store.Store
	Conn    core.Connection
	Cgroups core.Cgroups
}

// vms: the cgroup of a VM's record.
type vms interface {
	CgroupOf(c *store.Container) core.VMCgroup
}

// CoreOf is the part of the runtime r a Meter uses.
func CoreOf(r *core.Runtime) Core {
	return Core{vms: r, Opts: &r.Opts, Store: r.Store, Conn: r.Conn, Cgroups: r.Cgroups}
}

// Meter measures a runtime's VMs.
type Meter struct{ Core }

// New returns a Meter on the runtime's core r.
func New(r Core) *Meter { return &Meter{Core: r} }

// Usage is a VM's figures read at one time.
type Usage struct {
	// At is when (Unix nanoseconds).
	At int64
	// Running: its qemu runs. The cgroup's and the guest's figures are
	// zeros otherwise.
	Running bool
	// Cgroup is the VM as the node pays for it: qemu's real usage, guest
	// and emulation together.
	Cgroup core.CgroupUsage
	// GuestInUse is the RAM its guest last reported in use; none
	// (GuestReported false) without a balloon driver, or when libvirt
	// cannot tell at once. The guest writes it: it only decides whether
	// kubelet tries to lower the limit. The resize itself then asks the
	// guest to unplug, and the cgroup follows only what it gave back
	// (package resize).
	GuestInUse    uint64
	GuestReported bool
	// Disk is its writable layer.
	Disk Disk
}

// Disk is the VM's overlay disk as kubelet's eviction sees a container's
// writable layer: the bytes the guest has written (allocated on the
// host), on the state dir's filesystem (Mountpoint); none for a VM whose
// root disk is on a volume.
type Disk struct {
	Mountpoint        string
	UsedBytes, Inodes uint64
}

// ContainerMemory is the VM's memory as its container's (working set and
// usage): the guest's account of it when it reports, else the cgroup's.
// kubelet lowers a memory limit (in-place resize) only above the
// container's usage, and a guest's page cache is RAM it gives back when
// asked. The pod's figures stay the cgroup's.
func (u Usage) ContainerMemory() (workingSet, usage uint64) {
	if u.GuestReported {
		return u.GuestInUse, u.GuestInUse
	}
	return u.Cgroup.WorkingSetBytes, u.Cgroup.MemoryBytes
}

// VM is a VM's record and its figures.
type VM struct {
	Rec *store.Container
	Usage
}

// Pod is a pod's record and its VM's figures: VM is nil while the pod has
// none, or its VM cannot be measured.
type Pod struct {
	Rec *store.Sandbox
	VM  *VM
}

// Container measures VM id.
func (m *Meter) Container(id string) (VM, error) {
	c, err := m.Store.Container(id)
	if err != nil {
		return VM{}, err
	}
	u, err := m.Measure(c)
	return VM{Rec: c, Usage: u}, err
}

// Containers measures every live VM keep keeps, leaving out those that
// cannot be measured.
func (m *Meter) Containers(keep func(*store.Container) bool) ([]VM, error) {
	recs, err := m.Store.LiveContainers()
	if err != nil {
		return nil, err
	}
	var out []VM
	for _, c := range recs {
		if !keep(c) {
			continue
		}
		if u, err := m.Measure(c); err == nil {
			out = append(out, VM{Rec: c, Usage: u})
		}
	}
	return out, nil
}

// Pod measures live pod id's VM.
func (m *Meter) Pod(id string) (Pod, error) {
	sb, err := m.Store.LiveSandbox(id)
	if err != nil {
		return Pod{}, err
	}
	return m.pod(sb), nil
}

// Pods measures the VM of every live pod keep keeps.
func (m *Meter) Pods(keep func(*store.Sandbox) bool) ([]Pod, error) {
	recs, err := m.Store.LiveSandboxes()
	if err != nil {
		return nil, err
	}
	var out []Pod
	for _, sb := range recs {
		if keep(sb) {
			out = append(out, m.pod(sb))
		}
	}
	return out, nil
}

func (m *Meter) pod(sb *store.Sandbox) Pod {
	p := Pod{Rec: sb}
	if sb.ContainerID == "" {
		return p
	}
	if c, err := m.Store.Container(sb.ContainerID); err == nil {
		if u, err := m.Measure(c); err == nil {
			p.VM = &VM{Rec: c, Usage: u}
		}
	}
	return p
}

// Measure reads c's figures now: its writable layer, and while its qemu
// runs its cgroup's usage (an error when that cannot be read) and its
// guest's account of its memory.
func (m *Meter) Measure(c *store.Container) (Usage, error) {
	u := Usage{At: time.Now().UnixNano(), Running: qemuRuns(c)}
	u.Disk = m.writableDisk(c)
	if !u.Running {
		return u, nil
	}
	cg, err := m.cgroup(c)
	if err != nil {
		return Usage{}, fmt.Errorf("stats of %s: %w", c.Domain, err)
	}
	u.Cgroup = cg
	if l, err := m.Conn.Get(); err == nil {
		if d, err := l.Lookup(c.Domain); err == nil {
			u.GuestInUse, u.GuestReported = guestInUse(l, d)
		}
	}
	return u, nil
}

// qemuRuns: the record says the VM runs and its user has not shut its
// guest down.
func qemuRuns(c *store.Container) bool {
	return c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && !c.Power().GuestOff()
}

// cgroup is what c's cgroup has used.
func (m *Meter) cgroup(c *store.Container) (core.CgroupUsage, error) {
	return m.Cgroups.Stats(m.CgroupOf(c))
}

// guestInUse is the RAM d's guest last reported in use; ok false when it
// reports none or libvirt cannot tell at once.
func guestInUse(l virt.Libvirt, d virt.Domain) (inUse uint64, ok bool) {
	g, ok, err := l.GuestMemory(d)
	if err != nil || !ok {
		return 0, false
	}
	return g.InUseBytes(), true
}

// writableDisk is c's overlay disk (Disk).
func (m *Meter) writableDisk(c *store.Container) Disk {
	d := Disk{Mountpoint: m.Opts.StateDir}
	if c.RootVolume != nil {
		// The volume's, not the state dir's: kubelet counts the volume.
	} else if fi, err := os.Lstat(vmfiles.DiskPathOf(m.Store, c)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			d.UsedBytes, d.Inodes = uint64(st.Blocks)*512, 1
		}
	}
	return d
}
