package vmmigration

import (
	"context"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/crimux/crimux/kubeapi"
)

// statusWriter holds a migration as last written and writes its status:
// each change is applied to the object as the API server has it (a
// conflict reads it again and applies the change again), so a user's
// spec.cancel meanwhile is never undone.
type statusWriter struct {
	store Store
	log   *slog.Logger

	mu  sync.Mutex
	cur *kubeapi.VMMigration
}

func newStatusWriter(store Store, m *kubeapi.VMMigration, log *slog.Logger) *statusWriter {
	return &statusWriter{store: store, log: log, cur: m.DeepCopy()}
}

// get is the migration as last written (or read).
func (w *statusWriter) get() *kubeapi.VMMigration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur.DeepCopy()
}

// update applies change to the status and writes it, retrying for up to
// a minute; what could not be written stays in memory, for the next
// write (a worker of a controller that lost the API server writes it
// once the server is back, or the next worker does the step again).
func (w *statusWriter) update(change func(*kubeapi.VMMigrationStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := w.cur.DeepCopy()
	change(&next.Status)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: 1 << 20}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		written, err := w.store.UpdateStatus(ctx, next)
		switch {
		case err == nil:
			next = written
			return true, nil
		case apierrors.IsConflict(err):
			fresh, gerr := w.store.Get(ctx, next.Namespace, next.Name)
			if gerr == nil {
				status := next.Status
				next = fresh
				next.Status = status
			}
			return false, nil
		case apierrors.IsNotFound(err):
			return true, nil // deleted: nobody reads it any more
		}
		return false, nil
	})
	if err != nil {
		w.log.Warn("VMMigration status not written", "migration", next.Namespace+"/"+next.Name, "phase", next.Status.Phase, "err", err)
	}
	w.cur = next
}

// setCondition sets condition typ of st.
func setCondition(st *kubeapi.VMMigrationStatus, typ string, ok bool, reason, msg string, now metav1.Time) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	c := metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: now}
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			if st.Conditions[i].Status == status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}
