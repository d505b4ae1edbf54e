package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// The source's steps: 2 (describe the VM for T) and 6 (Migrate, in a
// goroutine of its own, migrate_run.go; the worker writes its progress
// and its end).

// interruptedRunning and interruptedGone are a source's result when a
// restarted crimux finds its Migrate recorded started with no outcome: the
// migration ended with the crimux that ran it (its streams were that
// crimux's), and where the VM is tells how. A VM gone from here had
// switched over, so it is reported Succeeded: the target's
// FinishMigration then confirms it, or fails, and the controller removes T,
// never the pod the VM runs in. Reporting Failed instead would have the
// controller delete T, where the VM then runs.
const (
	interruptedRunning = "crimux restarted while the VM was migrating: the migration ended with it, and the VM runs on here"
	interruptedGone    = "crimux restarted while the VM was migrating, and the VM no longer runs here: taken to have moved (the target's FinishMigration says whether it arrived)"
)

// describe is step 2: S's VM as T needs it, in migration-source, once
// per target: a migration-source naming another target (an earlier
// attempt) is replaced. A refusal is migration-result Failed with no
// token (no Migrate was started): the controller stops there. It is asked
// again on the pod's next pass (GetMigrationSource only reads), and a
// success then replaces it.
func (r *reconciler) describe(ctx context.Context, p *pass, to string) error {
	var src kubeapi.MigrationSource
	if p.decode(kubeapi.AnnotationMigrationSource, &src) && src.Target == to {
		return nil
	}
	resp, err := r.vms.GetMigrationSource(ctx, &vmv1.GetMigrationSourceRequest{Vm: p.ref})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		res := kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: fmt.Sprintf("GetMigrationSource (for target pod %s): %v", to, err)}
		if p.setJSON(kubeapi.AnnotationMigrationResult, res) {
			p.log.Warn("node agent: the VM cannot be described for its migration", "target", to, "err", err)
			p.event(corev1.EventTypeWarning, ReasonMigrationFailed, res.Message)
		}
		return nil
	}
	s := resp.GetSource()
	p.setJSON(kubeapi.AnnotationMigrationSource, sourceAnnotation(to, s))
	// A refusal left from an earlier attempt would read as this one's.
	var res kubeapi.MigrationResult
	if p.decode(kubeapi.AnnotationMigrationResult, &res) && res.Token == "" {
		p.set(kubeapi.AnnotationMigrationResult, nil)
	}
	p.log.Info("node agent: VM described for its migration", "target", to)
	return nil
}

// migrateOut is step 6: once T's migration-target (for this pod) is
// here, Migrate is started, once per token: in memory while this crimux
// runs, and in the pod's record (started before the call) across
// restarts. One Migrate at a time per pod: a new token waits for the
// last one's end.
func (r *reconciler) migrateOut(ctx context.Context, p *pass, to string) error {
	var tgt kubeapi.MigrationTarget
	if !p.decode(kubeapi.AnnotationMigrationTarget, &tgt) || tgt.Source != p.podKey() || tgt.Token == "" {
		return nil
	}
	m := r.migration(p.pod.UID)
	if run := m.run; run != nil {
		if run.token == tgt.Token {
			return r.follow(ctx, p, run)
		}
		if !run.isEnded() {
			return nil // its end asks for a pass
		}
		if err := r.follow(ctx, p, run); err != nil {
			return err
		}
	}
	if p.hasMigrationResult(tgt.Token) {
		return nil
	}
	rec, err := r.records.load(p.pod.UID)
	if err != nil {
		return err
	}
	if last := rec.Requests[migrateKind]; last.Value == tgt.Token {
		return r.resumeRecorded(p, last, to)
	}
	rec.Namespace, rec.Name = p.pod.Namespace, p.pod.Name
	if rec.Requests == nil {
		rec.Requests = map[string]requestState{}
	}
	rec.Requests[migrateKind] = requestState{Value: tgt.Token, Phase: phaseStarted, At: r.now()}
	if err := r.records.save(rec); err != nil {
		return err // not started: retried
	}
	m.run = r.startMigrate(ctx, p, tgt, to)
	p.log.Info("node agent: migrating the VM", "target", to, "address", tgt.Address)
	p.event(corev1.EventTypeNormal, ReasonMigrationStarted, fmt.Sprintf("migrating the VM to pod %s (%s)", to, tgt.Address))
	return nil
}

// follow writes what a Migrate of this crimux reported since the last
// pass: its progress (when due: at most every progressEvery), or its
// result, recorded once.
func (r *reconciler) follow(ctx context.Context, p *pass, run *migrationRun) error {
	prog, ended, err := run.take()
	if !ended {
		if prog != nil {
			p.setJSON(kubeapi.AnnotationMigrationProgress, progressOf(run.token, prog))
		}
		return nil
	}
	if ctx.Err() != nil {
		// Stopping: the Migrate was cancelled with the agent. Left
		// started, it is reported by the next crimux, from where the VM
		// is, rather than as "context canceled".
		return ctx.Err()
	}
	res := kubeapi.MigrationResult{Token: run.token, Phase: kubeapi.MigrationSucceeded}
	if err != nil {
		res.Phase, res.Message = kubeapi.MigrationFailed, err.Error()
	}
	if !run.settled {
		if err := r.recordOutcome(p, res); err != nil {
			// Reported all the same; after a restart it is found
			// started, and resumeRecorded tells it from the VM.
			p.log.Error("node agent: migration's outcome not recorded", "token", run.token, "err", err)
		}
		run.settled = true
	}
	r.reportResult(p, res, run.target)
	return nil
}

// resumeRecorded reports a Migrate this crimux did not start, or no
// longer remembers: its outcome recorded, or, found started, the
// outcome where the VM now is tells (interruptedRunning/Gone).
func (r *reconciler) resumeRecorded(p *pass, last requestState, to string) error {
	res := kubeapi.MigrationResult{Token: last.Value, Phase: kubeapi.MigrationSucceeded, Message: last.Outcome}
	switch {
	case last.Phase == phaseStarted && p.state != vmv1.PowerState_POWER_STATE_UNSPECIFIED:
		res.Phase, res.Message = kubeapi.MigrationFailed, interruptedRunning
	case last.Phase == phaseStarted:
		res.Message = interruptedGone
	case last.Phase == phaseFailed:
		res.Phase = kubeapi.MigrationFailed
	}
	if last.Phase == phaseStarted {
		p.log.Warn("node agent: Migrate was under way when crimux stopped; not started again", "token", last.Value, "outcome", res.Message)
		if err := r.recordOutcome(p, res); err != nil {
			return err
		}
	}
	r.reportResult(p, res, to)
	return nil
}

// recordOutcome records how the Migrate of res.Token ended.
func (r *reconciler) recordOutcome(p *pass, res kubeapi.MigrationResult) error {
	rec, err := r.records.load(p.pod.UID)
	if err != nil {
		return err
	}
	if rec.Requests == nil {
		rec.Requests = map[string]requestState{}
	}
	rec.Namespace, rec.Name = p.pod.Namespace, p.pod.Name
	st := requestState{Value: res.Token, Phase: phaseDone, Outcome: res.Message, At: r.now()}
	if res.Phase != kubeapi.MigrationSucceeded {
		st.Phase = phaseFailed
	}
	rec.Requests[migrateKind] = st
	return r.records.save(rec)
}

// reportResult writes a Migrate's result and announces it, unless the
// pod has a result for its token already.
func (r *reconciler) reportResult(p *pass, res kubeapi.MigrationResult, to string) {
	if p.hasMigrationResult(res.Token) || !p.setJSON(kubeapi.AnnotationMigrationResult, res) {
		return
	}
	if res.Phase == kubeapi.MigrationSucceeded {
		msg := "the VM moved to pod " + to
		if res.Message != "" {
			msg += ": " + res.Message
		}
		p.log.Info("node agent: "+msg, "token", res.Token)
		p.event(corev1.EventTypeNormal, ReasonMigrated, msg)
		return
	}
	msg := fmt.Sprintf("the VM did not move to pod %s (it runs on here): %s", to, res.Message)
	p.log.Warn("node agent: "+msg, "token", res.Token)
	p.event(corev1.EventTypeWarning, ReasonMigrationFailed, msg)
}

// hasMigrationResult: the pod's migration-result answers token.
func (p *pass) hasMigrationResult(token string) bool {
	var res kubeapi.MigrationResult
	return p.decode(kubeapi.AnnotationMigrationResult, &res) && res.Token == token
}

// progressOf is a Migrate progress as migration-progress says it.
func progressOf(token string, m *vmv1.MigrateProgress) kubeapi.MigrationProgress {
	return kubeapi.MigrationProgress{Token: token, ElapsedMS: m.GetElapsedMs(), TotalBytes: m.GetDataTotalBytes(),
		ProcessedBytes: m.GetDataProcessedBytes(), RemainingBytes: m.GetDataRemainingBytes(),
		DirtyRateBytes: m.GetDirtyRateBytes(), Iteration: m.GetIteration()}
}
