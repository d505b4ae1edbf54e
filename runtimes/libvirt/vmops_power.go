package libvirt

import (
	"context"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// powerState is the VM's power state; "" unless its container runs. Records
// from before the VM API have none: they run.
func (c *containerRecord) powerState() vmtypes.PowerState {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return ""
	}
	if c.PowerState == "" {
		return vmtypes.PowerRunning
	}
	return c.PowerState
}

// powerStatus is what ContainerStatus shows of a power state other than
// Running: the container stays CONTAINER_RUNNING, the reason says why the
// guest does not run.
func powerStatus(c *containerRecord) (reason, message string, ok bool) {
	switch c.powerState() {
	case vmtypes.PowerPaused:
		return "Paused", "VM paused by its user (crimux VM API): vCPUs suspended, memory kept", true
	case vmtypes.PowerShutdown:
		return "Shutdown", "VM shut down by its user (crimux VM API): domain and disk kept, power it Running to boot it", true
	case vmtypes.PowerHibernate:
		return "Hibernated", "VM hibernated by its user (crimux VM API): memory saved to disk, power it Running to resume it", true
	}
	return "", "", false
}

// powerStateOf is the power state a domain is in as libvirt reports it.
func powerStateOf(v domainView) vmtypes.PowerState {
	switch v.state {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return vmtypes.PowerRunning
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return vmtypes.PowerPaused
	}
	if v.managedSave {
		return vmtypes.PowerHibernate
	}
	return vmtypes.PowerShutdown
}

// powerStep is what libvirt must do to reach a power state.
type powerStep int

const (
	stepNone powerStep = iota
	stepSuspend
	stepResume
	stepShutdown
	stepResumeShutdown
	stepManagedSave
	stepCreate
	stepCreatePaused
)

// planPower decides the step from the domain's real state (not the one
// recorded: libvirt is the truth about what runs) to target, or refuses
// the change with FailedPrecondition.
func planPower(v domainView, target vmtypes.PowerState) (powerStep, error) {
	switch v.state {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked, golibvirt.DomainPaused:
		paused := v.state == golibvirt.DomainPaused
		switch target {
		case vmtypes.PowerRunning:
			return pick(paused, stepResume, stepNone), nil
		case vmtypes.PowerPaused:
			return pick(paused, stepNone, stepSuspend), nil
		case vmtypes.PowerShutdown:
			return pick(paused, stepResumeShutdown, stepShutdown), nil
		case vmtypes.PowerHibernate:
			return stepManagedSave, nil
		}
	case golibvirt.DomainShutoff:
		switch target {
		case vmtypes.PowerRunning:
			return stepCreate, nil
		case vmtypes.PowerPaused:
			return stepCreatePaused, nil
		case vmtypes.PowerShutdown:
			if v.managedSave {
				return 0, fmt.Errorf("VM is hibernated: shutting it down would discard its saved memory; power it Running first: %w", errdefs.ErrFailedPrecondition)
			}
			return stepNone, nil
		case vmtypes.PowerHibernate:
			if !v.managedSave {
				return 0, fmt.Errorf("VM is shut down: it has no memory to hibernate; power it Running first: %w", errdefs.ErrFailedPrecondition)
			}
			return stepNone, nil
		}
	}
	return 0, fmt.Errorf("domain is %s: no power state can be set now: %w", domainStateName(v.state), errdefs.ErrFailedPrecondition)
}

func pick(cond bool, yes, no powerStep) powerStep {
	if cond {
		return yes
	}
	return no
}

// SetPowerState moves the VM of a pod or container ID to target. grace
// bounds how long a Shutdown waits for the guest (0: the default).
func (r *Runtime) SetPowerState(ctx context.Context, id string, target vmtypes.PowerState, grace time.Duration) (vmtypes.PowerChange, error) {
	if !target.Valid() {
		return vmtypes.PowerChange{}, errdefs.Invalid("state", "%q is not a power state (Running, Paused, Shutdown, Hibernate)", target)
	}
	if grace <= 0 {
		grace = vmtypes.DefaultShutdownTimeout
	}
	c, unlock, err := r.lockVM(id)
	if err != nil {
		return vmtypes.PowerChange{}, err
	}
	defer unlock()
	if err := requireRunning(c); err != nil {
		return vmtypes.PowerChange{}, err
	}
	l, dom, err := r.domainOf(c)
	if err != nil {
		return vmtypes.PowerChange{}, err
	}
	v, err := observe(l, dom)
	if err != nil {
		return vmtypes.PowerChange{}, err
	}
	prev := powerStateOf(v)
	step, err := planPower(v, target)
	if err != nil {
		return vmtypes.PowerChange{Previous: prev, State: prev}, fmt.Errorf("set power state %s: %w", target, err)
	}
	// Record a stop before libvirt makes it: its lifecycle event must not
	// end the container.
	if target.GuestOff() && step != stepNone {
		c.PowerState = target
		if err := r.store.putContainer(c); err != nil {
			return vmtypes.PowerChange{}, err
		}
	}
	// Once libvirt acts, the step runs to its end even if the caller goes.
	forced, stepErr := r.powerStep(context.WithoutCancel(ctx), l, dom, c, step, grace)
	r.settlePower(l, dom, c, prev)
	if stepErr != nil {
		return vmtypes.PowerChange{Previous: prev, State: c.powerState()}, fmt.Errorf("set power state %s: %w", target, stepErr)
	}
	r.log.Info("VM power state set", "container", c.ID, "domain", c.Domain, "from", prev, "to", c.PowerState, "forced", forced)
	return vmtypes.PowerChange{Previous: prev, State: c.powerState(), Forced: forced}, nil
}

func (r *Runtime) powerStep(ctx context.Context, l *golibvirt.Libvirt, dom golibvirt.Domain, c *containerRecord, step powerStep, grace time.Duration) (forced bool, err error) {
	switch step {
	case stepSuspend:
		err = l.DomainSuspend(dom)
	case stepResume:
		err = l.DomainResume(dom)
	case stepResumeShutdown, stepShutdown:
		if step == stepResumeShutdown {
			// A paused guest cannot hear the power button.
			if err := l.DomainResume(dom); err != nil {
				return false, classify(err)
			}
		}
		var reason string
		_, reason, err = shutdownDomain(ctx, l, c.Domain, grace)
		forced = reason == "Killed"
	case stepManagedSave:
		// Saved as running: whether it comes back running or paused is
		// chosen when it is started.
		err = l.DomainManagedSave(dom, uint32(golibvirt.DomainSaveRunning))
	case stepCreate:
		err = l.DomainCreate(dom)
	case stepCreatePaused:
		_, err = l.DomainCreateWithFlags(dom, uint32(golibvirt.DomainStartPaused))
	}
	return forced, classify(err)
}

// settlePower records the power state libvirt reports after an operation,
// done or failed; fallback if libvirt cannot say.
func (r *Runtime) settlePower(l *golibvirt.Libvirt, dom golibvirt.Domain, c *containerRecord, fallback vmtypes.PowerState) {
	p := fallback
	if v, err := observe(l, dom); err == nil {
		p = powerStateOf(v)
	}
	c.PowerState = p
	if err := r.store.putContainer(c); err != nil {
		r.log.Error("record VM power state", "container", c.ID, "power_state", p, "err", err)
	}
}

// stopIsNoExit reports whether a stopped domain leaves its container
// running: the user chose a power state without a guest (Shutdown,
// Hibernate), or the domain runs again (a snapshot revert or a restore
// restarts qemu, and libvirt reports the old process stopped). The caller
// holds the pod's lock, so no VM API operation is halfway.
func (r *Runtime) stopIsNoExit(c *containerRecord, reason string) bool {
	if reason == "DomainGone" {
		return false
	}
	if c.powerState().GuestOff() {
		return true
	}
	l, err := r.conn.get()
	if err != nil {
		return false
	}
	dom, err := l.DomainLookupByName(c.Domain)
	if err != nil {
		return false
	}
	v, err := observe(l, dom)
	return err == nil && v.state != golibvirt.DomainShutoff
}

// resumeIfPaused lets a paused guest hear the power button before a CRI
// stop.
func (r *Runtime) resumeIfPaused(l *golibvirt.Libvirt, c *containerRecord) {
	if c.powerState() != vmtypes.PowerPaused {
		return
	}
	if dom, err := l.DomainLookupByName(c.Domain); err == nil {
		if err := l.DomainResume(dom); err != nil {
			r.log.Warn("resume paused VM before stopping it", "container", c.ID, "err", err)
		}
	}
}
