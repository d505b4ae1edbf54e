package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// applyPowerState moves the VM to the state crimux.io/power-state
// declares, when it is in another one. Level-triggered: the VM's state is
// compared before every call, so a pass repeated (after an outage, a
// restart, a resync) changes nothing that is already so.
func (r *reconciler) applyPowerState(ctx context.Context, p *pass) {
	value, ok := p.annotations[kubeapi.AnnotationPowerState]
	if !ok {
		p.set(kubeapi.AnnotationPowerStateError, nil) // nothing declared: nothing refused
		return
	}
	want, valid := parsePowerState(value)
	if !valid {
		p.refuse(ReasonInvalidPowerState, fmt.Sprintf("%s: %q is not a power state: use Running, Paused, Shutdown or Hibernate",
			kubeapi.AnnotationPowerState, value))
		return
	}
	p.declared = want
	if p.state == want {
		p.set(kubeapi.AnnotationPowerStateError, nil)
		return
	}
	resp, err := r.vms.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: p.ref, State: want})
	if err != nil {
		p.powerFailed = true
		p.refuse(ReasonPowerStateFailed, fmt.Sprintf("%s: %s: %v", kubeapi.AnnotationPowerState, value, err))
		return
	}
	previous := p.state
	p.state = resp.GetState()
	p.set(kubeapi.AnnotationPowerStateError, nil)
	msg := fmt.Sprintf("power state %s -> %s (%s: %s)", powerStateName(previous), powerStateName(p.state), kubeapi.AnnotationPowerState, value)
	if resp.GetForced() {
		msg += "; the guest did not power off in time and was forced off"
	}
	p.log.Info("node agent: "+msg, "previous", powerStateName(previous), "state", powerStateName(p.state))
	p.event(corev1.EventTypeNormal, ReasonPowerStateChanged, msg)
}

// refuse reports why the declared power state is not applied: in
// crimux.io/power-state-error, and a Warning event when that message is
// new (a refusal repeated on every pass is announced once).
func (p *pass) refuse(reason, msg string) {
	if !p.set(kubeapi.AnnotationPowerStateError, &msg) {
		p.log.Debug("node agent: power state still not applied", "reason", reason, "msg", msg)
		return
	}
	p.log.Warn("node agent: power state not applied", "reason", reason, "msg", msg)
	p.event(corev1.EventTypeWarning, reason, msg)
}
