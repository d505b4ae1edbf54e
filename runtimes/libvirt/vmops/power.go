package vmops

import (
	"context"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
	"github.com/crimux/crimux/vmtypes"
)

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
func planPower(v core.DomainView, target vmtypes.PowerState) (powerStep, error) {
	switch v.State {
	case virt.StateRunning, virt.StateBlocked, virt.StatePaused:
		paused := v.State == virt.StatePaused
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
	case virt.StateShutoff:
		switch target {
		case vmtypes.PowerRunning:
			return stepCreate, nil
		case vmtypes.PowerPaused:
			return stepCreatePaused, nil
		case vmtypes.PowerShutdown:
			if v.ManagedSave {
				return 0, fmt.Errorf("VM is hibernated: shutting it down would discard its saved memory; power it Running first: %w", errdefs.ErrFailedPrecondition)
			}
			return stepNone, nil
		case vmtypes.PowerHibernate:
			if !v.ManagedSave {
				return 0, fmt.Errorf("VM is shut down: it has no memory to hibernate; power it Running first: %w", errdefs.ErrFailedPrecondition)
			}
			return stepNone, nil
		}
	}
	return 0, fmt.Errorf("domain is %s: no power state can be set now: %w", v.State, errdefs.ErrFailedPrecondition)
}

func pick(cond bool, yes, no powerStep) powerStep {
	if cond {
		return yes
	}
	return no
}

// SetPowerState moves the VM of a pod or container ID to target. grace
// bounds how long a Shutdown waits for the guest (0: the default).
func (r *Ops) SetPowerState(ctx context.Context, id string, target vmtypes.PowerState, grace time.Duration) (vmtypes.PowerChange, error) {
	if !target.Valid() {
		return vmtypes.PowerChange{}, errdefs.Invalid("state", "%q is not a power state (Running, Paused, Shutdown, Hibernate)", target)
	}
	if grace <= 0 {
		grace = vmtypes.DefaultShutdownTimeout
	}
	op, err := r.BeginVMOp(id)
	if err != nil {
		return vmtypes.PowerChange{}, err
	}
	defer op.Done()
	c, prev := op.C, core.PowerStateOf(op.View)
	step, err := planPower(op.View, target)
	if err == nil && step == stepManagedSave {
		err = vmstorage.RequireNoShares(c, "Hibernate")
	}
	if err != nil {
		return vmtypes.PowerChange{Previous: prev, State: prev}, fmt.Errorf("set power state %s: %w", target, err)
	}
	// Record a stop before libvirt makes it: its lifecycle event must not
	// end the container.
	if target.GuestOff() && step != stepNone {
		c.PowerState = target
		if err := r.Store.PutContainer(c); err != nil {
			return vmtypes.PowerChange{}, err
		}
	}
	// Once libvirt acts, the step runs to its end even if the caller goes.
	forced, stepErr := r.powerStep(context.WithoutCancel(ctx), op.L, op.Dom, c, step, grace)
	r.settlePower(op.L, op.Dom, c, prev)
	if stepErr != nil {
		return vmtypes.PowerChange{Previous: prev, State: c.Power()}, fmt.Errorf("set power state %s: %w", target, stepErr)
	}
	r.watchPowerBoot(c, prev, step)
	r.Log.Info("VM power state set", "container", c.ID, "domain", c.Domain, "from", prev, "to", c.PowerState, "forced", forced)
	return vmtypes.PowerChange{Previous: prev, State: c.Power(), Forced: forced}, nil
}

func (r *Ops) powerStep(ctx context.Context, l virt.Libvirt, dom virt.Domain, c *store.Container, step powerStep, grace time.Duration) (forced bool, err error) {
	switch step {
	case stepSuspend:
		err = l.Suspend(dom)
	case stepResume:
		err = l.Resume(dom)
	case stepResumeShutdown, stepShutdown:
		if step == stepResumeShutdown {
			// A paused guest cannot hear the power button.
			if err := l.Resume(dom); err != nil {
				return false, err
			}
		}
		var reason string
		_, reason, err = core.ShutdownDomain(ctx, l, c.Domain, grace)
		forced = reason == "Killed"
	case stepManagedSave:
		// Saved as running: whether it comes back running or paused is
		// chosen when it is started.
		err = l.ManagedSave(dom)
	case stepCreate:
		err = r.StartingQemu(c, func() error { return l.Start(dom) })
	case stepCreatePaused:
		err = r.StartingQemu(c, func() error { return l.StartPaused(dom) })
	}
	return forced, err
}

// settlePower records the power state libvirt reports after an operation,
// done or failed; fallback if libvirt cannot say.
func (r *Ops) settlePower(l virt.Libvirt, dom virt.Domain, c *store.Container, fallback vmtypes.PowerState) {
	p := fallback
	if v, err := core.Observe(l, dom); err == nil {
		p = core.PowerStateOf(v)
	}
	c.PowerState = p
	if err := r.Store.PutContainer(c); err != nil {
		r.Log.Error("record VM power state", "container", c.ID, "power_state", p, "err", err)
	}
}

// watchPowerBoot follows a power change in the boot watch: a VM booted
// from Shutdown is watched for its guest's OS; one turned off is not
// stuck any more. (Resumed from Hibernate, the guest runs its saved
// memory: no boot to watch.)
func (r *Ops) watchPowerBoot(c *store.Container, prev vmtypes.PowerState, step powerStep) {
	switch {
	case prev == vmtypes.PowerShutdown && (step == stepCreate || step == stepCreatePaused):
		r.WatchBoot(c, time.Now(), true)
	case c.Power().GuestOff():
		r.Boots.Forget(c.ID)
	}
}
