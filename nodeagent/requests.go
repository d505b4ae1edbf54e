package nodeagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// interruptedOutcome is the outcome of a value found started: crimux
// stopped while the VM API call was under way, so whether it took effect
// is not known, and it is not done again.
const interruptedOutcome = "done (crimux restarted while it was under way; its outcome was not recorded)"

// requestKind is one edge-triggered request annotation.
type requestKind struct {
	// name keys the kind in a pod's record.
	name            string
	request, result string
	// done and failed are the reasons of the events reporting it.
	done, failed string
	// act calls the VM API and says what it did.
	act func(ctx context.Context, r *reconciler, p *pass, value string) (string, error)
	// snapshots: done, it changed the VM's snapshots (or which one is
	// current), so crimux.io/snapshots is listed again (snapshots.go).
	snapshots bool
}

// requestKinds, in the order a pass takes them up (doc.go says why).
// Delete goes between restore and snapshot: after the restore, so that
// one annotate can go back to a snapshot and drop it (restore s1, delete
// s1) rather than fail the restore of a snapshot just deleted; before
// the snapshot, so that deleting one frees its place under the VM's cap
// (libvirt.max_snapshots_per_vm) for the snapshot asked for with it:
// rotating (delete the oldest, take a new one) works in one pass at the
// cap. Restore still precedes snapshot, as doc.go has it.
var requestKinds = []requestKind{
	{name: "restore", request: kubeapi.AnnotationRestoreRequest, result: kubeapi.AnnotationRestoreResult,
		done: ReasonSnapshotRestored, failed: ReasonRestoreFailed, act: restore, snapshots: true},
	{name: "snapshot-delete", request: kubeapi.AnnotationSnapshotDeleteRequest, result: kubeapi.AnnotationSnapshotDeleteResult,
		done: ReasonSnapshotDeleted, failed: ReasonSnapshotDeleteFailed, act: deleteSnapshot, snapshots: true},
	{name: "snapshot", request: kubeapi.AnnotationSnapshotRequest, result: kubeapi.AnnotationSnapshotResult,
		done: ReasonSnapshotCreated, failed: ReasonSnapshotFailed, act: snapshot, snapshots: true},
	{name: "reboot", request: kubeapi.AnnotationRebootRequest, result: kubeapi.AnnotationRebootResult,
		done: ReasonRebooted, failed: ReasonRebootFailed, act: reboot},
}

// applyRequests takes up each request whose value is new, once, and
// reports the outcome of each value. An error means a value could not be
// recorded as started (so it was not done; the pass is retried) or the
// agent is stopping.
func (r *reconciler) applyRequests(ctx context.Context, p *pass) error {
	var rec *record
	for _, k := range requestKinds {
		value := p.annotations[k.request]
		if value == "" {
			continue
		}
		if rec == nil {
			loaded, err := r.records.load(p.pod.UID)
			if err != nil {
				return err
			}
			loaded.Namespace, loaded.Name = p.pod.Namespace, p.pod.Name
			if loaded.Requests == nil {
				loaded.Requests = map[string]requestState{}
			}
			rec = &loaded
		}
		if err := r.applyRequest(ctx, p, k, rec, value); err != nil {
			return err
		}
	}
	return nil
}

func (r *reconciler) applyRequest(ctx context.Context, p *pass, k requestKind, rec *record, value string) error {
	if last := rec.Requests[k.name]; last.Value == value {
		if last.Phase == phaseStarted {
			last = requestState{Value: value, Phase: phaseDone, Outcome: interruptedOutcome, At: r.now()}
			rec.Requests[k.name] = last
			if err := r.records.save(*rec); err != nil {
				return err
			}
			p.log.Warn("node agent: request was under way when crimux stopped; not done again", "request", k.request, "value", value)
		}
		p.result(k, last)
		return nil
	}
	// Recorded started as the VM API is about to act (after its checks,
	// just before libvirt is asked): whatever happens next, this value is
	// not taken up again, and a crash leaves it started only if the action
	// was, at most, just requested.
	var saveErr error
	actCtx := vmtypes.WithBeforeAct(ctx, func() error {
		rec.Requests[k.name] = requestState{Value: value, Phase: phaseStarted, At: r.now()}
		if saveErr = r.records.save(*rec); saveErr != nil {
			return fmt.Errorf("%s %q not taken up: %w", k.request, value, saveErr)
		}
		return nil
	})
	outcome, err := k.act(actCtx, r, p, value)
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // stopping: left started (if it got so far), reported after the restart
	case saveErr != nil:
		return err // not done: the pass is retried
	}
	st := requestState{Value: value, Phase: phaseDone, Outcome: outcome, At: r.now()}
	if err != nil {
		st.Phase, st.Outcome = phaseFailed, "failed: "+err.Error()
	} else if k.snapshots {
		p.snapshotsChanged = true
	}
	rec.Requests[k.name] = st
	if err := r.records.save(*rec); err != nil {
		// Reported all the same; should crimux restart before a later
		// save, the value is found started and not done again.
		p.log.Error("node agent: outcome not recorded", "request", k.request, "value", value, "err", err)
	}
	p.log.Info("node agent: request taken up", "request", k.request, "value", value, "outcome", st.Outcome)
	p.result(k, st)
	return nil
}

// hasResult reports whether the pod's result annotation of k speaks of
// value already.
func (p *pass) hasResult(k requestKind, value string) bool {
	return strings.HasPrefix(p.annotations[k.result], value+": ")
}

// result reports a value's outcome as "<value>: <outcome>", and announces
// it, unless the pod already has a result for that value.
func (p *pass) result(k requestKind, st requestState) {
	if p.hasResult(k, st.Value) {
		return
	}
	text := st.Value + ": " + st.Outcome
	p.set(k.result, &text)
	eventType, reason := corev1.EventTypeNormal, k.done
	if st.Phase == phaseFailed {
		eventType, reason = corev1.EventTypeWarning, k.failed
	}
	p.event(eventType, reason, k.request+" "+text)
}

func reboot(ctx context.Context, r *reconciler, p *pass, _ string) (string, error) {
	resp, err := r.vms.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: p.ref})
	switch {
	case err != nil:
		return "", err
	case resp.GetSoftTimedOut():
		return "rebooted (hard: the guest did not restart within the soft reboot's deadline)", nil
	case resp.GetMethod() == vmv1.RebootMethod_REBOOT_METHOD_HARD:
		return "rebooted (hard)", nil
	}
	return "rebooted (soft)", nil
}

func snapshot(ctx context.Context, r *reconciler, p *pass, name string) (string, error) {
	_, err := r.vms.CreateSnapshot(ctx, &vmv1.CreateSnapshotRequest{
		Vm: p.ref, SnapshotName: name,
		Description: fmt.Sprintf("%s on pod %s/%s", kubeapi.AnnotationSnapshotRequest, p.pod.Namespace, p.pod.Name),
	})
	if err != nil {
		return "", err
	}
	return "created", nil
}

func restore(ctx context.Context, r *reconciler, p *pass, name string) (string, error) {
	resp, err := r.vms.RestoreSnapshot(ctx, &vmv1.RestoreSnapshotRequest{Vm: p.ref, SnapshotName: name})
	if err != nil {
		return "", err
	}
	p.state = resp.GetState()
	if name := powerStateName(p.state); name != "" {
		return "restored (" + name + ")", nil
	}
	return "restored", nil
}

// deleteSnapshot deletes snapshot name. The VM API's DeleteSnapshot acts
// right after finding the snapshot, without announcing it
// (vmtypes.BeforeAct), so the value is recorded started here, just
// before the call: a crimux stopped during it does not delete again (and
// report a snapshot gone by its own hand as not found) but reports the
// value done, outcome unknown. The window this opens, the VM API's
// checks (the name, the snapshot there), is as short as the call.
func deleteSnapshot(ctx context.Context, r *reconciler, p *pass, name string) (string, error) {
	if _, err := r.vms.DeleteSnapshot(ctx, &vmv1.DeleteSnapshotRequest{Vm: p.ref, SnapshotName: name}); err != nil {
		return "", err
	}
	return "deleted", nil
}
