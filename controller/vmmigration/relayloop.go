package vmmigration

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// relay carries the agents' answers between S and T (steps 3, 5 and 7)
// until T's finish, a failure, or mctx's end (the migration's deadline,
// or ctx's: the controller stopping, or the user cancelling). s and t
// are the pods as last read (nil: gone); what the relay learns goes to
// the status as it learns it.
func (w *worker) relay(ctx, mctx context.Context, r relay, s, t *corev1.Pod) outcome {
	wctx, stop := context.WithCancel(mctx)
	defer stop()
	events := make(chan kubeclient.PodEvent)
	go kubeclient.WatchPod(wctx, w.client, r.ns, r.source, events)
	go kubeclient.WatchPod(wctx, w.client, r.ns, r.target, events)

	cur := map[string]*corev1.Pod{r.source: s, r.target: t}
	// sent: what was copied to each pod, not copied again while the
	// watch has yet to show it there.
	sent := map[string]map[string]string{r.source: {}, r.target: {}}
	st := w.resumedState()
	var said told
	hint := time.NewTimer(w.timing.HintAfter)
	defer hint.Stop()
	var finishDue <-chan time.Time // once S's Migrate failed
	for {
		step := r.next(st, cur[r.source], cur[r.target])
		st = step.state
		for name, copies := range map[string]map[string]string{r.source: step.toSource, r.target: step.toTarget} {
			if err := w.copyTo(mctx, cur[name], copies, sent[name]); err != nil {
				return outcome{state: st, failure: fmt.Sprintf("relay to pod %s: %v", name, ended(mctx, err))}
			}
		}
		w.tell(r, step, cur[r.target], &said)
		switch {
		case step.failure != "":
			return outcome{state: st, failure: step.failure, finishFailed: step.finishFailed}
		case step.finish != nil:
			return outcome{state: st, finish: step.finish}
		case st.sourceFailed != "" && finishDue == nil:
			finishDue = time.After(w.finishLeft())
		}
		select {
		case <-finishDue:
			return outcome{state: st, failure: fmt.Sprintf("the source could not send the VM: %s; then the target's node agent did not finish within %s",
				st.sourceFailed, w.timing.FinishWait)}
		case <-mctx.Done():
			return outcome{state: st, failure: w.stopped(ctx, mctx), cancelled: errors.Is(context.Cause(ctx), errCancelled)}
		case <-hint.C:
			w.hint(r, &said)
			hint.Reset(w.timing.HintAfter)
		case ev := <-events:
			if ev.Err != nil {
				return outcome{state: st, failure: fmt.Sprintf("watch pod %s: %v", ev.Name, ev.Err)}
			}
			cur[ev.Name] = ev.Pod
		}
	}
}

// resumedState is what earlier workers learnt, as the status keeps it.
func (w *worker) resumedState() relayState {
	st := w.status.get().Status
	return relayState{token: st.Token, moved: st.Moved, sourceFailed: st.SourceFailed}
}

// finishLeft is how long T's finish is still waited for once S's
// Migrate failed: FinishWait from when the status first said so.
func (w *worker) finishLeft() time.Duration {
	if at := w.status.get().Status.SourceFailedAt; at != nil {
		return max(at.Add(w.timing.FinishWait).Sub(w.now()), 0)
	}
	return w.timing.FinishWait
}

// stopped says why mctx ended: a cancel, the deadline, or the
// controller stopping.
func (w *worker) stopped(ctx, mctx context.Context) string {
	switch {
	case errors.Is(context.Cause(ctx), errCancelled):
		return "cancelled (spec.cancel)"
	case ctx.Err() != nil:
		return "the controller stopped"
	}
	return fmt.Sprintf("timed out after %s", w.timing.Timeout)
}

// copyTo patches onto pod the copies it was not sent yet.
func (w *worker) copyTo(ctx context.Context, pod *corev1.Pod, copies, sent map[string]string) error {
	changes := map[string]*string{}
	for k, v := range copies {
		if sent[k] != v {
			changes[k] = &v
		}
	}
	if len(changes) == 0 || pod == nil {
		return nil
	}
	if _, err := kubeclient.PatchAnnotations(ctx, w.client, FieldManager, pod, changes); err != nil {
		return err
	}
	for k, v := range changes {
		sent[k] = *v
	}
	return nil
}

// told remembers what the status said, to say each thing once.
type told struct {
	source, target, running, moved bool
	progress, waiting, node        string
	hintedSource, hintedTarget     bool
}

// tell writes to the status what step says that was not said before: the
// phase, the target's node once it has one, the progress, the relay's
// state (token, moved, the source's failure), and a line of what
// happened.
func (w *worker) tell(r relay, st step, t *corev1.Pod, said *told) {
	var lines []string
	node := ""
	if t != nil {
		node = t.Spec.NodeName
	}
	if node != "" && node != said.node {
		said.node = node
	}
	if st.targetRunning && !said.running {
		said.running = true
		lines = append(lines, fmt.Sprintf("target pod %s running on %s", r.target, node))
	}
	if st.targetWaiting != said.waiting {
		said.waiting = st.targetWaiting
		if st.targetWaiting != "" && !said.running {
			lines = append(lines, fmt.Sprintf("target pod %s: %s", r.target, st.targetWaiting))
		}
	}
	if st.sourceReady != nil && !said.source {
		said.source = true
		lines = append(lines, fmt.Sprintf("source pod %s ready to send its VM (image %s)", r.source, shortDigest(st.sourceReady.ImageDigest)))
	}
	if st.targetReady != nil && !said.target {
		said.target = true
		lines = append(lines, fmt.Sprintf("target pod %s ready to receive it at %s", r.target, st.targetReady.Address))
	}
	progressed := st.progress != "" && st.progress != said.progress
	said.progress = st.progress
	if st.state.moved && !said.moved {
		said.moved = true
		lines = append(lines, fmt.Sprintf("the VM left %s; waiting for %s to take it over", r.source, r.target))
	}
	w.record(st, node, lines, progressed)
}

// record writes what tell learnt, when anything changed.
func (w *worker) record(st step, node string, lines []string, progressed bool) {
	phase := phaseOf(st)
	cur := w.status.get().Status
	changed := len(lines) > 0 || progressed || phase != cur.Phase || node != cur.TargetNode && node != "" ||
		st.state.token != cur.Token || st.state.moved != cur.Moved || st.state.sourceFailed != cur.SourceFailed
	if !changed {
		return
	}
	now := w.now()
	w.status.update(func(s *kubeapi.VMMigrationStatus) {
		s.Phase = phase
		if node != "" {
			s.TargetNode = node
		}
		s.Token, s.Moved = st.state.token, st.state.moved
		if st.state.sourceFailed != "" && s.SourceFailed == "" {
			at := metaTime(now)
			s.SourceFailedAt = &at
		}
		s.SourceFailed = st.state.sourceFailed
		if progressed {
			p := st.prog
			s.Progress = &p
		}
		if len(lines) > 0 {
			s.Reason, s.Message = phase, lines[len(lines)-1]
		}
	})
	for _, l := range lines {
		w.events.onMigration(w.status.get(), corev1.EventTypeNormal, phase, l)
	}
}

// phaseOf is the phase a step shows.
func phaseOf(st step) string {
	switch {
	case st.progress != "" || st.state.moved || st.state.sourceFailed != "":
		return kubeapi.VMMigrationRunning
	case st.targetReady != nil:
		return kubeapi.VMMigrationTargetReady
	}
	return kubeapi.VMMigrationScheduling
}

// hint names the agent the migration has waited for a while, once: S's
// answers migrate-to at once, T's once T's VM container runs.
func (w *worker) hint(r relay, said *told) {
	const on = "is crimux's node agent on there ([kubernetes] in crimux's config)?"
	var msg string
	switch {
	case !said.source && !said.hintedSource:
		said.hintedSource = true
		msg = fmt.Sprintf("still waiting for %s's node agent to answer for pod %s: %s", w.status.get().Status.SourceNode, r.source, on)
	case said.source && said.running && !said.target && !said.hintedTarget:
		said.hintedTarget = true
		msg = fmt.Sprintf("still waiting for %s's node agent to answer for pod %s: %s", said.node, r.target, on)
	default:
		return
	}
	w.status.update(func(s *kubeapi.VMMigrationStatus) { s.Message = msg })
	w.events.onMigration(w.status.get(), corev1.EventTypeWarning, "AgentSilent", msg)
}
