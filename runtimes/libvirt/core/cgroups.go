package core

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
)

// defaultCPUPeriod is the CFS period used when the container sets a quota
// without one.
const defaultCPUPeriod = 100000

// CgroupOf is the cgroup a VM's qemu runs in: a child of the pod's
// cgroup_parent named after the VM, limited to the container's CPU and
// memory, the memory limit raised by qemu's own overhead.
func (r *Runtime) CgroupOf(c *store.Container) VMCgroup {
	res := c.Config.GetLinux().GetResources()
	cg := VMCgroup{
		Parent: c.CgroupParent, Name: c.Domain,
		CPUQuota: res.GetCpuQuota(), CPUPeriod: res.GetCpuPeriod(), CPUShares: uint64(res.GetCpuShares()),
		MemoryLimit: max(res.GetMemoryLimitInBytes(), guestCharged(c)) + r.Opts.MemoryOverheadMiB<<20,
		CPUs:        res.GetCpusetCpus(), Mems: res.GetCpusetMems(),
	}
	if cg.CPUQuota > 0 && cg.CPUPeriod == 0 {
		cg.CPUPeriod = defaultCPUPeriod
	}
	return cg
}

// CgroupForDomain tells the qemu placement server which cgroup a domain's
// qemu belongs in; ok is false for a domain this runtime does not own.
func (r *Runtime) CgroupForDomain(domain string) (VMCgroup, bool) {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return VMCgroup{}, false
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return VMCgroup{}, false
	}
	return r.CgroupOf(c), true
}

// NICForDomain is what the qemu wrapper of a VM's domain gets besides
// its placement: its pod's NIC (vmnet.Networks.NIC). A template's is
// instant.Placement's.
func (r *Runtime) NICForDomain(domain, fd string) (*os.File, []string, error) {
	return r.Networks.NIC(domain, fd)
}

// IdentityForDomain is the identity a domain's qemu runs as: its pod's
// (nil: libvirt's shared qemu user); ok is false for a domain this
// runtime does not own.
func (r *Runtime) IdentityForDomain(domain string) (*store.VMIdentity, bool) {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return nil, false
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, false
	}
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return nil, false
	}
	return sb.Identity, true
}

// StorageForDomain gives a starting qemu of a domain its VM's storage
// (vmstorage.Starter: its block devices and its shares' virtiofsd, each
// placed in the VM's cgroup). A template has none (instant.Placement).
func (r *Runtime) StorageForDomain(domain string, placeholder func(i int) string) ([]*os.File, []string, error) {
	s := vmstorage.Starter{Store: r.Store, StateDir: r.Opts.StateDir, Shares: r.Shares,
		Place: func(c *store.Container, pid int) error { return r.Cgroups.Place(r.CgroupOf(c), pid) }}
	return s.ForDomain(domain, placeholder)
}

// SetOOMScore gives a VM's newly placed process (the wrapper, about to
// become qemu: the score survives exec) the OOM score adjustment kubelet
// asked for its container (from its QoS class: -997 Guaranteed, 1000
// BestEffort), so the node's OOM killer weighs a VM as kubelet meant.
// Records without one (an adopted VM, a config without resources) keep
// qemu's own. A score crimux may not set (a negative one needs
// CAP_SYS_RESOURCE, which a crimux in a container may lack) is logged and
// the VM starts with qemu's own: better a VM than none.
func (r *Runtime) SetOOMScore(domain string, pid int) error {
	id, found := strings.CutPrefix(domain, vm.DomainName(""))
	if !found {
		return fmt.Errorf("%s is no crimux VM", domain)
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return err
	}
	res := c.Config.GetLinux().GetResources()
	if res == nil {
		return nil
	}
	adj := res.GetOomScoreAdj()
	path := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	err = os.WriteFile(path, []byte(strconv.FormatInt(adj, 10)), 0)
	if errors.Is(err, os.ErrPermission) {
		r.Log.Warn("VM's OOM score adjustment not set: crimux lacks CAP_SYS_RESOURCE; qemu keeps its own", "container", c.ID, "oom_score_adj", adj)
		return nil
	}
	if err != nil {
		return fmt.Errorf("oom_score_adj %d of VM %s's process %d: %w", adj, c.ID, pid, err)
	}
	return nil
}

// guestCharged is the guest RAM the VM's memory cgroup is charged for:
// none when it is huge pages (the hugetlb controller's, not memory's).
func guestCharged(c *store.Container) int64 {
	if hp, _ := vm.HugePagesFrom(c.Config.GetLinux().GetResources()); hp.PageKiB != 0 {
		return 0
	}
	return int64(c.MemoryMiB << 20)
}
