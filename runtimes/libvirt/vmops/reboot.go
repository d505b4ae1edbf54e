package vmops

import (
	"context"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// RebootVM reboots a running VM. Soft: libvirt presses the ACPI power
// button and, when the guest powers off, resets it instead of stopping it
// (qemu's "fake reboot"); libvirt's reboot event says it happened. Without
// that event within timeout (0: the default), or with hard, the VM is
// reset. The CRI container stays as it is: same ID, running.
func (r *Ops) RebootVM(ctx context.Context, id string, hard bool, timeout time.Duration) (vmtypes.RebootResult, error) {
	if timeout <= 0 {
		timeout = vmtypes.DefaultRebootTimeout
	}
	op, err := r.BeginVMOp(id)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	defer op.Done()
	c, l, dom := op.C, op.L, op.Dom
	if p := core.PowerStateOf(op.View); p != vmtypes.PowerRunning || c.Power() != vmtypes.PowerRunning {
		return vmtypes.RebootResult{}, fmt.Errorf("the VM is %s (domain %s): a reboot needs a running VM; power it Running first: %w",
			c.Power(), op.View.State, errdefs.ErrFailedPrecondition)
	}
	if hard {
		if err := vmtypes.BeforeAct(ctx); err != nil {
			return vmtypes.RebootResult{}, err
		}
		return vmtypes.RebootResult{Hard: true}, r.resetVM(l, dom, c)
	}
	rebooted, err := r.softReboot(ctx, l, dom, c, timeout)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	if rebooted {
		r.Log.Info("VM rebooted by its guest", "container", c.ID, "domain", c.Domain)
		return vmtypes.RebootResult{}, nil
	}
	r.Log.Warn("VM did not reboot softly in time; resetting it", "container", c.ID, "domain", c.Domain, "timeout", timeout)
	return vmtypes.RebootResult{Hard: true, SoftTimedOut: true}, r.resetVM(l, dom, c)
}

// softReboot asks the guest to reboot and waits for libvirt's reboot event
// of the domain; false when it did not come in time (or libvirt refused
// the request). The wait is registered first, so the event cannot be
// missed.
func (r *Ops) softReboot(ctx context.Context, l virt.Libvirt, dom virt.Domain, c *store.Container, timeout time.Duration) (bool, error) {
	rebooted, cancel, err := r.Reboots.Wait(l, c.Domain)
	if err != nil {
		return false, err
	}
	defer cancel()
	if err := vmtypes.BeforeAct(ctx); err != nil {
		return false, err
	}
	if err := l.Reboot(dom); err != nil {
		r.Log.Warn("soft reboot refused; resetting", "container", c.ID, "err", err)
		return false, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-rebooted:
		return true, nil
	case <-l.Disconnected():
		return false, fmt.Errorf("libvirtd connection lost while waiting for VM %s to reboot: %w", c.Domain, errdefs.ErrUnavailable)
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (r *Ops) resetVM(l virt.Libvirt, dom virt.Domain, c *store.Container) error {
	if err := l.Reset(dom); err != nil {
		return fmt.Errorf("reset domain %s: %w", c.Domain, err)
	}
	r.Log.Info("VM reset", "container", c.ID, "domain", c.Domain)
	return nil
}
