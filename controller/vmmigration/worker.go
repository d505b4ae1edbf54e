package vmmigration

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// FieldManager is the controller's name in the objects it writes.
const FieldManager = "crimux-controller"

// Timing bounds a migration's waits (0: the defaults).
type Timing struct {
	// Timeout bounds a migration from its start (DefaultTimeout).
	Timeout time.Duration
	// GoneWait bounds the wait for the source pod to go once the VM left
	// it; CleanupWait the clean-up after a failure; HintAfter is how long
	// an agent is waited for before the status names it; FinishWait how
	// long the target's finish is waited for once the source's Migrate
	// failed.
	GoneWait, CleanupWait, HintAfter, FinishWait time.Duration
}

// DefaultTimeout bounds a migration unless Timing says otherwise.
const DefaultTimeout = 30 * time.Minute

func (t Timing) withDefaults() Timing {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&t.Timeout, DefaultTimeout}, {&t.GoneWait, time.Minute}, {&t.CleanupWait, time.Minute},
		{&t.HintAfter, 30 * time.Second}, {&t.FinishWait, time.Minute}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return t
}

// errCancelled ends a worker whose migration the user cancelled.
var errCancelled = errors.New("cancelled (spec.cancel)")

// worker carries one VMMigration out, from its status: it starts it (the
// target pod, the source's migrate-to) unless the status says it was
// started, relays the agents' answers until the target's finish or a
// failure, and ends it. Each step is one the API server keeps: a worker
// started again on the same object, after the controller died at any
// point, goes on from where the last one was.
type worker struct {
	client  kubernetes.Interface
	status  *statusWriter
	timing  Timing
	now     func() time.Time
	events  eventSink
	metrics *Metrics
}

// run is the migration until it ends; ctx ends with the controller (or
// with the cause errCancelled). A controller that stops mid-way leaves
// the migration as its status says, for the next one.
func (w *worker) run(ctx context.Context) {
	m := w.status.get()
	if kubeapi.Final(m.Status.Phase) {
		return
	}
	if errors.Is(context.Cause(ctx), errCancelled) && m.Status.TargetPod == "" {
		w.dropUnrecordedTarget(m)
		w.end(kubeapi.VMMigrationFailed, "Cancelled", "cancelled (spec.cancel) before it started", outcome{})
		return
	}
	s, t, err := w.startOrResume(ctx)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errCancelled) {
			return // the controller stops: the next one resumes
		}
		w.refuse(ctx, err)
		return
	}
	w.carry(ctx, s, t)
}

// dropUnrecordedTarget deletes the target pod an earlier worker of m
// made but did not live to record (its name is m's, and it carries m's
// label): nothing else would.
func (w *worker) dropUnrecordedTarget(m *kubeapi.VMMigration) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timing.CleanupWait)
	defer cancel()
	name := targetName(m.Spec.Pod, uidSuffix(m.UID))
	t, err := w.client.CoreV1().Pods(m.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil && t.Labels[kubeapi.LabelVMMigration] == m.Name {
		_ = kubeclient.DeletePod(ctx, w.client, t)
	}
}

// carry relays until the end and ends the migration. s and t are the
// pods as the worker found them (nil: gone).
func (w *worker) carry(ctx context.Context, s, t *corev1.Pod) {
	m := w.status.get()
	mctx, cancel := context.WithDeadline(ctx, m.Status.StartTime.Add(w.timing.Timeout))
	defer cancel()
	r := relay{ns: m.Namespace, source: m.Spec.Pod, target: m.Status.TargetPod,
		sourceUID: types.UID(m.Status.SourceUID), targetUID: types.UID(m.Status.TargetUID)}
	o := w.relay(ctx, mctx, r, s, t)
	if ctx.Err() != nil && !o.cancelled {
		return // the controller stops mid-way: the next one resumes
	}
	if o.failure != "" {
		w.fail(r, o)
		return
	}
	cur := w.recorded(context.Background(), r.source, string(r.sourceUID))
	if cur != nil && !sourceSent(o.state, cur) {
		w.keepBoth(r, o, cur)
		return
	}
	w.removeSource(r, o, cur)
}

// outcome is how the relay ended: T's finish, or why it failed.
type outcome struct {
	state        relayState
	finish       *kubeapi.MigrationFinish
	failure      string
	finishFailed bool // T's agent said the VM did not arrive
	cancelled    bool // the user cancelled it
}

// sourceSent: S's node agent said its Migrate of this migration's token
// succeeded (the VM left S), as the relay saw it or as S (cur, read
// last) says now: the relay may have stopped just as S's agent said so.
// Only S's agent, on S's node, may write S's result (the node agents'
// admission policy): T's node's word never deletes S.
func sourceSent(st relayState, cur *corev1.Pod) bool {
	if st.moved {
		return true
	}
	if st.token == "" || cur == nil {
		return false
	}
	var res kubeapi.MigrationResult
	ok, _ := kubeapi.DecodeAnnotation(cur.Annotations, kubeapi.AnnotationMigrationResult, &res)
	return ok && res.Token == st.token && res.Phase == kubeapi.MigrationSucceeded
}

// keepBoth ends a migration whose target's node says the VM arrived while
// the source's has not said it left: both pods are kept, for a person to
// check where the VM runs.
func (w *worker) keepBoth(r relay, o outcome, s *corev1.Pod) {
	said := "has not said it left"
	if why := o.state.sourceFailed; why != "" {
		said = "said: " + why
	}
	msg := fmt.Sprintf("pod %s's node agent says the VM arrived, but pod %s's (on %s) %s; both pods are kept: once you checked that the VM runs in pod %s alone, kubectl delete pod -n %s %s",
		r.target, r.source, s.Spec.NodeName, said, r.target, r.ns, r.source)
	w.end(kubeapi.VMMigrationFailed, "BothPodsKept", msg, o)
}

// removeSource is the last step: the VM runs in T, S goes (cur: S as it
// is now; nil: gone already, by an earlier worker).
func (w *worker) removeSource(r relay, o outcome, cur *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timing.GoneWait+w.timing.CleanupWait)
	defer cancel()
	took := w.now().Sub(w.status.get().Status.StartTime.Time)
	msg := finishLine(took, *o.finish)
	if cur != nil {
		if err := kubeclient.DeletePod(ctx, w.client, cur); err != nil {
			w.end(kubeapi.VMMigrationFailed, "SourceNotDeleted",
				fmt.Sprintf("the VM runs in pod %s now, but pod %s could not be deleted: %v", r.target, r.source, err), o)
			return
		}
		if gone, err := kubeclient.WaitGone(ctx, w.client, cur, w.timing.GoneWait); err == nil && !gone {
			msg += fmt.Sprintf("; source pod %s still terminating after %s", r.source, w.timing.GoneWait)
		}
		w.events.onPod(cur, corev1.EventTypeNormal, "Migrated", fmt.Sprintf("the VM moved to pod %s on %s", r.target, w.status.get().Status.TargetNode))
	}
	if o.finish.Note != "" {
		msg += "; note: " + o.finish.Note
	}
	w.end(kubeapi.VMMigrationSucceeded, "Migrated", msg, o)
}

// end writes the migration's final status, after its event (so that
// whoever sees the status final finds the event).
func (w *worker) end(phase, reason, msg string, o outcome) {
	now := metav1.NewTime(w.now())
	w.events.onMigration(w.status.get(), eventType(phase), reason, msg)
	w.status.update(func(st *kubeapi.VMMigrationStatus) {
		st.Phase, st.Reason, st.Message, st.EndTime = phase, reason, msg, &now
		st.Token, st.Moved = o.state.token, o.state.moved
		if o.finish != nil {
			st.DowntimeMS = o.finish.DowntimeMS
		}
		setCondition(st, "Ready", phase == kubeapi.VMMigrationSucceeded, reason, msg, now)
	})
	var took time.Duration
	if start := w.status.get().Status.StartTime; start != nil {
		took = now.Sub(start.Time)
	}
	var downtime int64
	if o.finish != nil {
		downtime = o.finish.DowntimeMS
	}
	w.metrics.ended(phase, reason, took, downtime)
}

// refuse ends a migration that could not start: nothing was changed,
// or what was (a target pod) goes.
func (w *worker) refuse(ctx context.Context, err error) {
	m := w.status.get()
	reason := "Refused"
	var nm *notMovable
	if errors.As(err, &nm) {
		reason = nm.reason
	}
	if errors.Is(context.Cause(ctx), errCancelled) {
		reason = "Cancelled"
	}
	if name := m.Status.TargetPod; name != "" {
		cctx, cancel := context.WithTimeout(context.Background(), w.timing.CleanupWait)
		defer cancel()
		t := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, UID: types.UID(m.Status.TargetUID)}}
		_ = kubeclient.DeletePod(cctx, w.client, t)
	}
	w.end(kubeapi.VMMigrationFailed, reason, err.Error(), outcome{})
}

// notMovable is a source pod's VM that cannot move at all (a
// node-local volume): the reason names it.
type notMovable struct {
	reason, msg string
}

func (e *notMovable) Error() string { return e.msg }

// ended is err, or what ended ctx if it did.
func ended(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return errors.New("interrupted")
	}
	return err
}

// isGone: the API answered that the object is not there.
func isGone(err error) bool { return apierrors.IsNotFound(err) }

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }
