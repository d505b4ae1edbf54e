package vmmigration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// fail is the last step of a failed migration: T goes, and S's migration
// annotations too, so that the next attempt starts clean; the VM runs on
// in S. Unless S's agent said the VM left S and T's has not said it did
// not arrive (the relay timed out, was stopped, or T failed first): the
// VM may run in T, so both pods are kept for a person to look at.
func (w *worker) fail(r relay, o outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timing.CleanupWait)
	defer cancel()
	st := o.state
	cur := w.recorded(ctx, r.source, string(r.sourceUID))
	st.moved = sourceSent(st, cur)
	o.state = st
	reason := failReason(o)
	if st.moved && !o.finishFailed {
		w.end(kubeapi.VMMigrationFailed, "BothPodsKept", fmt.Sprintf("%s; the VM left pod %s: it was sent to pod %s, whose node agent has not said whether it arrived; both pods are kept (kubectl describe pod -n %s %s)",
			o.failure, r.source, r.target, r.ns, r.target), o)
		return
	}
	msg := o.failure
	t := w.recorded(ctx, r.target, string(r.targetUID))
	if t != nil {
		if err := kubeclient.DeletePod(ctx, w.client, t); err != nil {
			msg += fmt.Sprintf("; target pod %s not deleted: %v (kubectl delete pod -n %s %s)", r.target, err, r.ns, r.target)
		} else {
			msg += fmt.Sprintf("; deleted target pod %s", r.target)
		}
	}
	if cur != nil {
		msg += w.clearSource(ctx, cur)
	}
	switch {
	case st.moved:
		msg += fmt.Sprintf("; the VM left pod %s (its node agent said it was sent) but did not arrive in pod %s: it runs in neither", r.source, r.target)
	case cur != nil && cur.DeletionTimestamp == nil && cur.Status.Phase == corev1.PodRunning:
		msg += fmt.Sprintf("; the VM still runs in pod %s on %s, unchanged", r.source, cur.Spec.NodeName)
	default:
		msg += fmt.Sprintf("; pod %s no longer runs; its VM did not move", r.source)
	}
	if cur != nil {
		w.events.onPod(cur, corev1.EventTypeWarning, "MigrationFailed", o.failure)
	}
	w.end(kubeapi.VMMigrationFailed, reason, msg, o)
}

// clearSource removes S's migration annotations; it says how that went.
func (w *worker) clearSource(ctx context.Context, s *corev1.Pod) string {
	removal := map[string]*string{kubeapi.AnnotationMigrateTo: nil}
	for _, k := range kubeapi.MigrationAnnotations {
		removal[k] = nil
	}
	if _, err := kubeclient.PatchAnnotations(ctx, w.client, FieldManager, s, removal); err != nil {
		return fmt.Sprintf("; the migration annotations of pod %s not removed: %v", s.Name, err)
	}
	return ""
}

// failReason is a failed outcome's reason word.
func failReason(o outcome) string {
	switch {
	case o.cancelled:
		return "Cancelled"
	case o.finishFailed:
		return "TargetFailed"
	case o.state.sourceFailed != "":
		return "SourceFailed"
	}
	return "MigrationFailed"
}
