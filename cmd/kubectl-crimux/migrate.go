package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/kubeapi"
)

// migration is one kubectl crimux migrate: pod ns/pod (S) to node.
type migration struct {
	client        kubernetes.Interface
	ns, pod, node string
	timeout       time.Duration
	out, errOut   io.Writer

	suffix func() string    // T's name's random part
	now    func() time.Time // for "moved in"
	// goneWait bounds the wait for S to go once the VM left it;
	// cleanupWait the cleanup after a failure; hintAfter is how long an
	// agent is waited for before the user is told which; finishWait how
	// long T's finish is waited for once S's Migrate failed.
	goneWait, cleanupWait, hintAfter, finishWait time.Duration
}

func newMigration(c kubernetes.Interface, ns, pod, node string, timeout time.Duration, out, errOut io.Writer) *migration {
	return &migration{
		client: c, ns: ns, pod: pod, node: node, timeout: timeout, out: out, errOut: errOut,
		suffix: randomSuffix, now: time.Now, goneWait: time.Minute, cleanupWait: time.Minute,
		hintAfter: 30 * time.Second, finishWait: time.Minute,
	}
}

// outcome is how the relay ended: T's finish, or why it failed.
type outcome struct {
	state        relayState
	finish       *kubeapi.MigrationFinish
	failure      string
	finishFailed bool // T's agent said the VM did not arrive
}

// run is the migration (kubeapi/migration.go's steps 1, 3,
// 5, 7 and 9: the agents do the others). ctx ends on SIGINT/SIGTERM.
func (m *migration) run(ctx context.Context) error {
	s, err := m.preflight(ctx)
	if err != nil {
		return err
	}
	start := m.now()
	m.printf("migrating pod %s/%s from %s to %s", m.ns, s.Name, s.Spec.NodeName, m.node)
	mctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()

	t, err := m.createTarget(mctx, s)
	if err != nil {
		return m.ended(ctx, err)
	}
	m.printf("created target pod %s on %s", t.Name, m.node)
	r := relay{ns: m.ns, source: s.Name, target: t.Name, sourceUID: s.UID, targetUID: t.UID, node: m.node}

	// 1. S: migrate-to = T, and nothing left of an earlier attempt.
	changes := map[string]*string{kubeapi.AnnotationMigrateTo: &t.Name}
	for _, k := range kubeapi.MigrationAnnotations {
		if _, ok := s.Annotations[k]; ok {
			changes[k] = nil
		}
	}
	patched, err := patchAnnotations(mctx, m.client, s, changes)
	if err != nil {
		return m.fail(outcome{failure: fmt.Sprintf("pod %s not asked to migrate: %v", s.Name, m.ended(ctx, err))}, s, t)
	}

	o := m.relay(ctx, mctx, r, patched, t)
	if o.failure != "" {
		return m.fail(o, s, t)
	}
	if !sourceSent(o.state, m.currentSource(s)) {
		return m.keepBoth(o, s, t)
	}
	m.printf("%s", finishLine(m.now().Sub(start), *o.finish))
	if o.finish.Note != "" {
		m.printf("note: %s", o.finish.Note)
	}
	return m.removeSource(s, t)
}

// currentSource is S as the API server has it now; nil if it is gone or
// another pod has its name.
func (m *migration) currentSource(s *corev1.Pod) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), m.cleanupWait)
	defer cancel()
	cur, err := m.client.CoreV1().Pods(m.ns).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil || cur.UID != s.UID {
		return nil
	}
	return cur
}

// sourceSent: S's node agent said its Migrate of this migration's token
// succeeded (the VM left S), as the relay saw it or as S (cur, read
// last; nil: gone) says now: the relay may have stopped just as S's
// agent said so. Only S's agent, on S's node, may write S's result (the
// node agents' admission policy): T's node's word never deletes S.
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
// the source's has not said it left: both pods are kept, and the user is
// told how to end it once they checked where the VM runs.
func (m *migration) keepBoth(o outcome, s, t *corev1.Pod) error {
	said := "has not said it left"
	if why := o.state.sourceFailed; why != "" {
		said = "said: " + why
	}
	if o.finish.Note != "" {
		m.eprintf("note from pod %s's node agent: %s", t.Name, o.finish.Note)
	}
	m.eprintf("pod %s's node agent says the VM arrived, but pod %s/%s's (on %s) %s; both pods are kept: once you checked that the VM runs in pod %s alone, kubectl delete pod -n %s %s",
		t.Name, m.ns, s.Name, s.Spec.NodeName, said, t.Name, m.ns, s.Name)
	return errReported
}

// ended is err, or what ended ctx if it did (a signal).
func (m *migration) ended(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}

// createTarget creates T (another random name if one is taken).
func (m *migration) createTarget(ctx context.Context, s *corev1.Pod) (*corev1.Pod, error) {
	pods := m.client.CoreV1().Pods(m.ns)
	for attempt := 0; ; attempt++ {
		t := targetPod(s, targetName(s.Name, m.suffix()), m.node)
		created, err := pods.Create(ctx, t, metav1.CreateOptions{FieldManager: fieldManager})
		switch {
		case err == nil:
			return created, nil
		case apierrors.IsAlreadyExists(err) && attempt < 3:
			continue
		case ctx.Err() != nil:
			// It may have been made all the same: it goes.
			cctx, cancel := context.WithTimeout(context.Background(), m.cleanupWait)
			defer cancel()
			_ = pods.Delete(cctx, t.Name, metav1.DeleteOptions{})
		}
		return nil, fmt.Errorf("create target pod %s: %w", t.Name, err)
	}
}

// relay carries the agents' answers between S and T (steps 3, 5 and 7)
// until T's finish, a failure, or mctx's end (the timeout, or ctx's: a
// signal).
func (m *migration) relay(ctx, mctx context.Context, r relay, s, t *corev1.Pod) outcome {
	wctx, stop := context.WithCancel(mctx)
	defer stop()
	events := make(chan podEvent)
	go watchPod(wctx, m.client, m.ns, r.source, events)
	go watchPod(wctx, m.client, m.ns, r.target, events)

	cur := map[string]*corev1.Pod{r.source: s, r.target: t}
	// sent: what was copied to each pod, not copied again while the
	// watch has yet to show it there.
	sent := map[string]map[string]string{r.source: {}, r.target: {}}
	var st relayState
	var said told
	hint := time.NewTimer(m.hintAfter)
	defer hint.Stop()
	var finishDue <-chan time.Time // once S's Migrate failed
	for {
		step := r.next(st, cur[r.source], cur[r.target])
		st = step.state
		for name, copies := range map[string]map[string]string{r.source: step.toSource, r.target: step.toTarget} {
			if err := m.copyTo(mctx, cur[name], copies, sent[name]); err != nil {
				return outcome{state: st, failure: fmt.Sprintf("relay to pod %s: %v", name, m.ended(ctx, err))}
			}
		}
		m.tell(r, step, &said)
		switch {
		case step.failure != "":
			return outcome{state: st, failure: step.failure, finishFailed: step.finishFailed}
		case step.finish != nil:
			return outcome{state: st, finish: step.finish}
		case st.sourceFailed != "" && finishDue == nil:
			finishDue = time.After(m.finishWait)
		}
		select {
		case <-finishDue:
			return outcome{state: st, failure: fmt.Sprintf("the source could not send the VM: %s; then the target's node agent did not finish within %s",
				st.sourceFailed, m.finishWait)}
		case <-mctx.Done():
			if ctx.Err() != nil {
				return outcome{state: st, failure: "interrupted"}
			}
			return outcome{state: st, failure: fmt.Sprintf("timed out after %s (--timeout)", m.timeout)}
		case <-hint.C:
			m.hint(r, s.Spec.NodeName, &said)
			hint.Reset(m.hintAfter)
		case ev := <-events:
			if ev.err != nil {
				return outcome{state: st, failure: fmt.Sprintf("watch pod %s: %v", ev.name, ev.err)}
			}
			cur[ev.name] = ev.pod
		}
	}
}

// copyTo patches onto pod the copies it was not sent yet.
func (m *migration) copyTo(ctx context.Context, pod *corev1.Pod, copies, sent map[string]string) error {
	changes := map[string]*string{}
	for k, v := range copies {
		if sent[k] != v {
			changes[k] = &v
		}
	}
	if len(changes) == 0 || pod == nil {
		return nil
	}
	if _, err := patchAnnotations(ctx, m.client, pod, changes); err != nil {
		return err
	}
	for k, v := range changes {
		sent[k] = *v
	}
	return nil
}

// removeSource is step 9: the VM runs in T, S goes.
func (m *migration) removeSource(s, t *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.goneWait+m.cleanupWait)
	defer cancel()
	if err := deletePod(ctx, m.client, s); err != nil {
		return fmt.Errorf("the VM runs in pod %s now, but pod %s could not be deleted: %w", t.Name, s.Name, err)
	}
	switch gone, err := waitGone(ctx, m.client, s, m.goneWait); {
	case err != nil:
		return fmt.Errorf("the VM runs in pod %s now; deleted pod %s, but: %w", t.Name, s.Name, err)
	case gone:
		m.printf("deleted source pod %s", s.Name)
	default:
		m.printf("source pod %s is still terminating after %s; not waiting longer", s.Name, m.goneWait)
	}
	return nil
}

// fail is step 9 of a failed migration: T goes, and S's migration
// annotations too, so that the next attempt starts clean; the VM runs on
// in S. Unless S's agent said the VM left S and T's has not said it did
// not arrive (the relay timed out, was interrupted, or T failed first):
// the VM may run in T, so both pods are kept for a person to look at.
func (m *migration) fail(o outcome, s, t *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.cleanupWait)
	defer cancel()
	st := o.state
	m.eprintf("kubectl-crimux: migration of pod %s/%s to %s failed: %s", m.ns, s.Name, m.node, o.failure)
	cur := m.currentSource(s)
	st.moved = sourceSent(st, cur)
	if st.moved && !o.finishFailed {
		m.eprintf("the VM left pod %s: it was sent to pod %s, whose node agent has not said whether it arrived; both pods are kept (kubectl describe pod -n %s %s)",
			s.Name, t.Name, m.ns, t.Name)
		return errReported
	}
	if err := deletePod(ctx, m.client, t); err != nil {
		m.eprintf("target pod %s not deleted: %v (kubectl delete pod -n %s %s)", t.Name, err, m.ns, t.Name)
	} else {
		m.eprintf("deleted target pod %s", t.Name)
	}
	if cur != nil {
		removal := map[string]*string{kubeapi.AnnotationMigrateTo: nil}
		for _, k := range kubeapi.MigrationAnnotations {
			removal[k] = nil
		}
		if _, err := patchAnnotations(ctx, m.client, s, removal); err != nil {
			m.eprintf("the migration annotations of pod %s not removed: %v", s.Name, err)
		} else {
			m.eprintf("removed the migration annotations of pod %s", s.Name)
		}
	}
	switch {
	case st.moved:
		m.eprintf("the VM left pod %s/%s (its node agent said it was sent) but did not arrive in pod %s: it runs in neither (kubectl describe pod -n %s %s)",
			m.ns, s.Name, t.Name, m.ns, s.Name)
	case cur != nil && cur.DeletionTimestamp == nil && cur.Status.Phase == corev1.PodRunning:
		m.eprintf("the VM still runs in pod %s/%s on %s, unchanged", m.ns, s.Name, s.Spec.NodeName)
	default:
		m.eprintf("pod %s/%s no longer runs; its VM did not move", m.ns, s.Name)
	}
	return errReported
}
