package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/kubeapi"
)

// follow prints migration name's steps (follower.show) until it ends,
// and returns it as it ended. If ctx ends first, or the migration cannot
// be read, it returns the error and the migration as last seen.
func (mc migrateCmd) follow(ctx context.Context, name string) (*kubeapi.VMMigration, error) {
	f := &follower{res: mc.res, ns: mc.ns, name: name, out: mc.in.stdout,
		last: &kubeapi.VMMigration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mc.ns}}}
	m, err := f.follow(ctx)
	if err != nil {
		return f.last, err
	}
	return m, nil
}

// follower follows one migration: it lists it, then watches it from
// there, and lists again whenever the watch ends, so that it misses no
// change and prints none twice.
type follower struct {
	res      dynamic.ResourceInterface
	ns, name string
	out      io.Writer

	last     *kubeapi.VMMigration       // as last seen
	message  string                     // the status.message printed last
	progress *kubeapi.MigrationProgress // the status.progress printed last
	stated   bool                       // the controller wrote a status
	silent   <-chan time.Time           // controllerHintAfter passed
}

// errGone: the migration was deleted before it ended.
var errGone = errors.New("was deleted before it ended")

func (f *follower) follow(ctx context.Context) (*kubeapi.VMMigration, error) {
	hint := time.NewTimer(controllerHintAfter)
	defer hint.Stop()
	f.silent = hint.C
	for {
		m, err := f.pass(ctx)
		switch {
		case m != nil:
			return m, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, errGone):
			return nil, fmt.Errorf("migration %s/%s %w", f.ns, f.name, err)
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsNotFound(err):
			return nil, fmt.Errorf("migration %s/%s: %w", f.ns, f.name, err)
		case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
			// The watch's version is too old: list again at once.
		case err != nil:
			// Anything else may pass (the API server restarting): read
			// it again shortly.
			if err := f.sleep(ctx, followRetry); err != nil {
				return nil, err
			}
		}
	}
}

// pass lists the migration and watches it from there: it returns it once
// it ended, else nil once the watch ends, or the error that ended it.
func (f *follower) pass(ctx context.Context) (*kubeapi.VMMigration, error) {
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", f.name).String()}
	l, err := f.res.List(ctx, byName)
	if err != nil {
		return nil, err
	}
	var found bool
	for i := range l.Items {
		if l.Items[i].GetName() != f.name {
			continue
		}
		found = true
		if m, err := f.saw(&l.Items[i]); m != nil || err != nil {
			return m, err
		}
	}
	if !found {
		return nil, errGone
	}
	byName.ResourceVersion, byName.AllowWatchBookmarks = l.GetResourceVersion(), true
	w, err := f.res.Watch(ctx, byName)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.silent:
			f.hint()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			u, isObj := ev.Object.(*unstructured.Unstructured)
			switch {
			case ev.Type == watch.Error:
				return nil, apierrors.FromObject(ev.Object)
			case !isObj || u.GetName() != f.name:
			case ev.Type == watch.Deleted:
				return nil, errGone
			case ev.Type == watch.Added || ev.Type == watch.Modified:
				if m, err := f.saw(u); m != nil || err != nil {
					return m, err
				}
			}
		}
	}
}

// saw shows the migration as read: it returns it if it ended.
func (f *follower) saw(u *unstructured.Unstructured) (*kubeapi.VMMigration, error) {
	m, err := vmmigration.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	f.last = m
	if f.show(m) {
		return m, nil
	}
	return nil, nil
}

// show prints what changed in m's status since it was last shown: a new
// progress report (progressLine), a new message (prefixed with the phase;
// but a failure's, which the caller prints). It reports whether m ended.
func (f *follower) show(m *kubeapi.VMMigration) bool {
	st := m.Status
	if st.Phase != "" {
		f.stated = true
	}
	if p := st.Progress; p != nil && (f.progress == nil || *p != *f.progress) {
		pc := *p
		f.progress = &pc
		fmt.Fprintln(f.out, progressLine(pc))
	}
	if st.Message != "" && st.Message != f.message {
		f.message = st.Message
		if st.Phase != kubeapi.VMMigrationFailed {
			fmt.Fprintf(f.out, "%s: %s\n", phaseOr(st.Phase), printable(st.Message))
		}
	}
	return kubeapi.Final(st.Phase)
}

// hint asks, once, whether the controller runs, if it has written no
// status yet.
func (f *follower) hint() {
	f.silent = nil
	if !f.stated {
		fmt.Fprintf(f.out, "VMMigration %s/%s has no status after %s: is crimux's controller (crimux-controller) running?\n",
			f.ns, f.name, controllerHintAfter)
	}
}

// sleep waits d, or until ctx ends.
func (f *follower) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.silent:
			f.hint()
		case <-t.C:
			return nil
		}
	}
}

// orUnsaid is s, or says that it is not there.
func orUnsaid(s string) string {
	if s == "" {
		return "(none given)"
	}
	return s
}

// phaseOr is a migration's phase, Pending before the controller set one.
func phaseOr(phase string) string {
	if phase == "" {
		return kubeapi.VMMigrationPending
	}
	return phase
}
