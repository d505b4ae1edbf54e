package libvirt

import (
	"context"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crimux/crimux/internal/errdefs"
)

// RebootVM reboots a running VM. Soft: libvirt presses the ACPI power
// button and, when the guest powers off, resets it instead of stopping it
// (qemu's "fake reboot"); libvirt's reboot event says it happened. Without
// that event within timeout (0: the default), or with hard, the VM is
// reset. The CRI container stays as it is: same ID, running.
func (r *Runtime) RebootVM(ctx context.Context, id string, hard bool, timeout time.Duration) (vmtypes.RebootResult, error) {
	if timeout <= 0 {
		timeout = vmtypes.DefaultRebootTimeout
	}
	c, unlock, err := r.lockVM(id)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	defer unlock()
	if err := requireRunning(c); err != nil {
		return vmtypes.RebootResult{}, err
	}
	l, dom, err := r.domainOf(c)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	v, err := observe(l, dom)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	if p := powerStateOf(v); p != vmtypes.PowerRunning || c.powerState() != vmtypes.PowerRunning {
		return vmtypes.RebootResult{}, fmt.Errorf("the VM is %s (domain %s): a reboot needs a running VM; power it Running first: %w",
			c.powerState(), domainStateName(v.state), errdefs.ErrFailedPrecondition)
	}
	if hard {
		return vmtypes.RebootResult{Hard: true}, r.resetVM(l, dom, c)
	}
	rebooted, err := r.softReboot(ctx, l, dom, c, timeout)
	if err != nil {
		return vmtypes.RebootResult{}, err
	}
	if rebooted {
		r.log.Info("VM rebooted by its guest", "container", c.ID, "domain", c.Domain)
		return vmtypes.RebootResult{}, nil
	}
	r.log.Warn("VM did not reboot softly in time; resetting it", "container", c.ID, "domain", c.Domain, "timeout", timeout)
	return vmtypes.RebootResult{Hard: true, SoftTimedOut: true}, r.resetVM(l, dom, c)
}

// softReboot asks the guest to reboot and waits for libvirt's reboot event
// of the domain; false when it did not come in time (or libvirt refused
// the request). The wait is registered first, so the event cannot be
// missed.
func (r *Runtime) softReboot(ctx context.Context, l *golibvirt.Libvirt, dom golibvirt.Domain, c *containerRecord, timeout time.Duration) (bool, error) {
	rebooted, cancel, err := r.reboots.wait(l, c.Domain)
	if err != nil {
		return false, err
	}
	defer cancel()
	if err := l.DomainReboot(dom, golibvirt.DomainRebootAcpiPowerBtn); err != nil {
		r.log.Warn("soft reboot refused; resetting", "container", c.ID, "err", err)
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

func (r *Runtime) resetVM(l *golibvirt.Libvirt, dom golibvirt.Domain, c *containerRecord) error {
	if err := l.DomainReset(dom, 0); err != nil {
		return fmt.Errorf("reset domain %s: %w", c.Domain, classify(err))
	}
	r.log.Info("VM reset", "container", c.ID, "domain", c.Domain)
	return nil
}
