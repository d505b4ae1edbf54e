package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// reconciler applies one pod's request annotations to its VM and reports
// the outcome on the pod.
type reconciler struct {
	vms     VMService
	kube    kubeWriter
	records *recordStore
	sent    *sentPatches
	log     *slog.Logger
	now     func() time.Time

	// migrations are the live migrations' state in memory, per pod UID
	// (migrate.go); made when first needed. Worker-only, like records.
	migrations map[types.UID]*podMigration
	// running counts the Migrate calls under way, each in a goroutine of
	// its own (migrate_run.go): Agent.Run waits for them.
	running sync.WaitGroup
	// enqueue asks for a pass over a pod (namespace/name) soon: how a
	// Migrate goroutine hands its progress and its end to the worker.
	// nil: nobody to ask (tests pass over the pod themselves).
	enqueue func(key string)
	// listed are the pods whose crimux.io/snapshots this agent wrote
	// since it started and that no snapshot request changed since
	// (snapshots.go). Worker-only.
	listed map[types.UID]bool
}

// pass is one reconcile of one pod: what it found and what it reports.
type pass struct {
	pod *corev1.Pod
	ref *vmv1.VMRef
	log *slog.Logger
	// annotations are the pod's, as the agent last wrote them.
	annotations map[string]string
	// state is the VM's power state, kept current as the pass acts.
	state vmv1.PowerState
	// domain is libvirt's state of its domain, as the VM API reported it
	// ("running", "shutoff", "undefined"...): whether a migration target's
	// VM has arrived (arriving).
	domain string
	// declared is the valid crimux.io/power-state, UNSPECIFIED if none;
	// powerFailed: applying it failed in this pass.
	declared    vmv1.PowerState
	powerFailed bool
	// snapshotsChanged: a request of the pass changed the VM's snapshots;
	// snapshotsListed: the pass lists them in crimux.io/snapshots.
	snapshotsChanged, snapshotsListed bool
	// changes are the annotations to patch (nil: remove), events what to
	// announce once they are written.
	changes map[string]*string
	events  []event
}

type event struct{ eventType, reason, message string }

// reconcile runs one pass over pod. again asks for another pass after a
// backoff though nothing failed: the VM is not there (or not running)
// yet, or a restore left it in another state than the declared one. ctx
// is the agent's lifetime (Run's): a Migrate the pass starts runs on
// under it after the pass.
func (r *reconciler) reconcile(ctx context.Context, pod *corev1.Pod) (again bool, err error) {
	if !active(pod) || !hasRequests(pod.Annotations) {
		return false, nil
	}
	p := r.newPass(pod)
	resp, err := r.vms.GetVM(ctx, &vmv1.GetVMRequest{Vm: p.ref})
	switch {
	case errdefs.IsNotFound(err):
		p.log.Debug("node agent: no VM for the pod yet; retrying", "err", err)
		return true, nil
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		r.notAVM(p, err)
		return false, r.report(ctx, p)
	case err != nil:
		return false, fmt.Errorf("get VM of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	p.state, p.domain = resp.GetVm().GetPowerState(), resp.GetVm().GetDomainState()
	// A migration target holds everything else until its VM has arrived
	// (doc.go): decided before this pass's own steps, so the pass that
	// finishes the arrival leaves the power state to the next one, which
	// reads the arrived VM's.
	hold := p.arriving()
	migErr := r.migrate(ctx, p, resp.GetVm())
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if hold || p.state == vmv1.PowerState_POWER_STATE_UNSPECIFIED {
		// A VM not running (yet, or any more: a source that has moved)
		// is retried; its migration's answers are written all the same.
		if p.state == vmv1.PowerState_POWER_STATE_UNSPECIFIED {
			p.log.Debug("node agent: the pod's VM does not run yet; retrying")
		}
		return p.state == vmv1.PowerState_POWER_STATE_UNSPECIFIED, errors.Join(migErr, r.report(ctx, p))
	}
	r.applyPowerState(ctx, p)
	reqErr := errors.Join(migErr, r.applyRequests(ctx, p))
	r.publishSnapshots(ctx, p)
	if ctx.Err() != nil {
		// Stopping: a value under way stays started in its record and is
		// reported by the next crimux; nothing is written now.
		return false, ctx.Err()
	}
	p.observe()
	if err := r.report(ctx, p); err != nil {
		return false, errors.Join(reqErr, err)
	}
	r.snapshotsPublished(p)
	drifted := p.declared != vmv1.PowerState_POWER_STATE_UNSPECIFIED && p.state != p.declared && !p.powerFailed
	return drifted, reqErr
}

// active: the pod may still have a VM to act on (not being deleted, not
// finished).
func active(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func (r *reconciler) newPass(pod *corev1.Pod) *pass {
	return &pass{
		pod: pod, ref: vmRef(pod),
		log:         r.log.With("pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID)),
		annotations: r.sent.annotations(pod.UID, pod.ResourceVersion, pod.Annotations),
		changes:     map[string]*string{},
	}
}

// set makes the pod's annotation key say value (nil: be absent) and
// reports whether that changes it; a later set of the same key overrides
// an earlier one.
func (p *pass) set(key string, value *string) bool {
	cur, ok := p.annotations[key]
	if value == nil && !ok || value != nil && ok && cur == *value {
		delete(p.changes, key)
		return false
	}
	p.changes[key] = value
	return true
}

// current is the value key has once the pass's changes are written.
func (p *pass) current(key string) (string, bool) {
	if v, ok := p.changes[key]; ok {
		if v == nil {
			return "", false
		}
		return *v, true
	}
	v, ok := p.annotations[key]
	return v, ok
}

// observe reports the VM's power state after the pass (none if the VM
// does not run).
func (p *pass) observe() {
	if name := powerStateName(p.state); name != "" {
		p.set(kubeapi.AnnotationObservedPowerState, &name)
	} else {
		p.set(kubeapi.AnnotationObservedPowerState, nil)
	}
}

func (p *pass) event(eventType, reason, message string) {
	p.events = append(p.events, event{eventType, reason, message})
}

// notAVM reports, on a container pod carrying request annotations, that
// they do not apply: the power state's error, each request's result and
// the migration step it is asked for say so, and one NotAVM event when
// any of them is new. err is the VM
// API's (FailedPrecondition: the pod is a container pod, or, rarely,
// several ready VM pods share its name; its message says which).
func (r *reconciler) notAVM(p *pass, err error) {
	msg := err.Error()
	changed := p.refuseMigration(msg)
	if value, ok := p.annotations[kubeapi.AnnotationPowerState]; ok {
		changed = p.set(kubeapi.AnnotationPowerStateError, ptr(fmt.Sprintf("%s: %s: not applied: %s", kubeapi.AnnotationPowerState, value, msg)))
	}
	for _, k := range requestKinds {
		value := p.annotations[k.request]
		if value != "" && !p.hasResult(k, value) {
			changed = p.set(k.result, ptr(value+": failed: "+msg)) || changed
		}
	}
	if changed {
		p.log.Warn("node agent: crimux.io requests on a pod that is not a VM", "err", err)
		p.event(corev1.EventTypeWarning, ReasonNotAVM, msg)
	}
}

// report patches the pass's annotation changes, then records its events.
// A failed patch fails the pass (retried with backoff) and announces
// nothing: the retry reports again. A failed event is logged only, as
// kubelet's recorder drops events it cannot send.
func (r *reconciler) report(ctx context.Context, p *pass) error {
	if len(p.changes) > 0 {
		version, err := r.kube.patchAnnotations(ctx, p.pod, p.changes)
		if err != nil {
			return err
		}
		r.sent.remember(p.pod.UID, version, p.changes)
	}
	for _, e := range p.events {
		if err := r.kube.recordEvent(ctx, p.pod, e.eventType, e.reason, e.message); err != nil {
			p.log.Warn("node agent: event not recorded", "reason", e.reason, "err", err)
		}
	}
	return nil
}

func ptr(s string) *string { return &s }
