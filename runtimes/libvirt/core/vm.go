package core

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// SandboxOf resolves a pod sandbox or container ID to its pod sandbox ID.
func (r *Runtime) SandboxOf(id string) (string, error) {
	if c, err := r.Store.Container(id); err == nil {
		return c.SandboxID, nil
	} else if !errdefs.IsNotFound(err) {
		return "", err
	}
	sb, err := r.Store.Sandbox(id)
	if errdefs.IsNotFound(err) {
		return "", fmt.Errorf("no VM pod or VM container has ID %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// LockVM takes the lock of the VM's pod and loads its container (the VM)
// under it.
func (r *Runtime) LockVM(id string) (*store.Container, func(), error) {
	sbID, err := r.SandboxOf(id)
	if err != nil {
		return nil, nil, err
	}
	unlock := r.Locks.Lock(sbID)
	c, err := r.vmOfSandbox(sbID)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return c, unlock, nil
}

func (r *Runtime) vmOfSandbox(sbID string) (*store.Container, error) {
	sb, err := r.Store.Sandbox(sbID)
	if err != nil {
		return nil, err
	}
	if sb.ContainerID == "" {
		return nil, fmt.Errorf("VM pod %q has no VM: its container is not created: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	return r.Store.Container(sb.ContainerID)
}

// RequireRunning refuses a VM whose CRI container is not running: the VM
// API powers, reboots and snapshots only VMs kubelet has started.
func RequireRunning(c *store.Container) error {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return fmt.Errorf("the VM's container is %s, not CONTAINER_RUNNING: %w", c.State, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// DomainOf looks the VM's domain up in libvirt.
func (r *Runtime) DomainOf(c *store.Container) (virt.Libvirt, virt.Domain, error) {
	l, err := r.Conn.Get()
	if err != nil {
		return nil, virt.Domain{}, err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return nil, virt.Domain{}, fmt.Errorf("domain %s of VM container %q: %w", c.Domain, c.ID, err)
	}
	return l, dom, nil
}

// DomainView is what libvirt says of a domain.
type DomainView struct {
	State       virt.State
	ManagedSave bool
}

// Observe asks libvirt for a domain's state and, when it is shut off,
// whether it has a managed save (hibernated).
func Observe(l virt.Libvirt, dom virt.Domain) (DomainView, error) {
	state, err := l.State(dom)
	if err != nil {
		return DomainView{}, err
	}
	v := DomainView{State: state}
	if v.State == virt.StateShutoff {
		if v.ManagedSave, err = l.HasManagedSave(dom); err != nil {
			return DomainView{}, err
		}
	}
	return v, nil
}

// PowerStateOf is the power state a domain is in as libvirt reports it.
func PowerStateOf(v DomainView) vmtypes.PowerState {
	switch v.State {
	case virt.StateRunning, virt.StateBlocked:
		return vmtypes.PowerRunning
	case virt.StatePaused, virt.StatePMSuspended:
		return vmtypes.PowerPaused
	}
	if v.ManagedSave {
		return vmtypes.PowerHibernate
	}
	return vmtypes.PowerShutdown
}

// stopIsNoExit reports whether a stopped domain leaves its container
// running: the user chose a power state without a guest (Shutdown,
// Hibernate), or the domain runs again (a snapshot revert or a restore
// restarts qemu, and libvirt reports the old process stopped). The caller
// holds the pod's lock, so no VM API operation is halfway.
func (r *Runtime) stopIsNoExit(c *store.Container, reason string) bool {
	if reason == "DomainGone" {
		return false
	}
	if c.Power().GuestOff() {
		return true
	}
	l, err := r.Conn.Get()
	if err != nil {
		return false
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return false
	}
	v, err := Observe(l, dom)
	return err == nil && v.State != virt.StateShutoff
}

// resumeIfPaused lets a paused guest hear the power button before a CRI
// stop.
func (r *Runtime) resumeIfPaused(l virt.Libvirt, c *store.Container) {
	if c.Power() != vmtypes.PowerPaused {
		return
	}
	if dom, err := l.Lookup(c.Domain); err == nil {
		if err := l.Resume(dom); err != nil {
			r.Log.Warn("resume paused VM before stopping it", "container", c.ID, "err", err)
		}
	}
}

// VMOp is a running VM the VM API acts on: its record, under its pod's
// lock, and its domain as libvirt sees it now. Every VM operation starts
// with BeginVMOp and ends with Done.
type VMOp struct {
	C      *store.Container
	L      virt.Libvirt
	Dom    virt.Domain
	View   DomainView
	unlock func()
}

// BeginVMOp locks the VM of a pod sandbox or container ID, requires its
// container to be running, finds its domain and observes it: the
// prologue of every VM operation, written once.
func (r *Runtime) BeginVMOp(id string) (*VMOp, error) {
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return nil, err
	}
	op := &VMOp{C: c, unlock: unlock}
	if err := r.observeOp(op); err != nil {
		unlock()
		return nil, err
	}
	return op, nil
}

func (r *Runtime) observeOp(op *VMOp) error {
	if err := RequireRunning(op.C); err != nil {
		return err
	}
	var err error
	if op.L, op.Dom, err = r.DomainOf(op.C); err != nil {
		return err
	}
	op.View, err = Observe(op.L, op.Dom)
	return err
}

// Done releases the VM's pod lock.
func (op *VMOp) Done() { op.unlock() }
