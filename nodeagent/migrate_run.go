package nodeagent

import (
	"context"
	"sync"
	"time"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// A source's Migrate takes seconds to minutes: it runs in a goroutine of
// its own, never in the agent's one worker, which goes on passing over
// the node's pods meanwhile. The goroutine writes nothing itself: it
// keeps the last progress and the end in its migrationRun and asks for a
// pass over the pod (reconciler.enqueue), and that pass writes them. So
// every patch of a pod still comes from the worker, one at a time, and
// the bookkeeping of patches the informer has not shown yet (sent.go)
// and the records (records.go) keep their one writer.

// migrationRun is one Migrate call. token, target and cancel are fixed
// at its start; the rest is shared with its goroutine, under mu, except
// settled, the worker's.
type migrationRun struct {
	token, target string
	cancel        context.CancelFunc

	mu sync.Mutex
	// latest is the last progress; due, that it should be written (at
	// most every progressEvery: dueAt is when it last became due).
	latest *vmv1.MigrateProgress
	due    bool
	dueAt  time.Time
	ended  bool
	err    error

	// settled: its outcome is recorded (the pod's record).
	settled bool
}

// progress keeps m; true if a pass should write it now.
func (run *migrationRun) progress(m *vmv1.MigrateProgress, now time.Time) bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.latest = m
	if !run.dueAt.IsZero() && now.Sub(run.dueAt) < progressEvery {
		return false
	}
	run.due, run.dueAt = true, now
	return true
}

// end keeps how Migrate returned.
func (run *migrationRun) end(err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.ended, run.err = true, err
}

func (run *migrationRun) isEnded() bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.ended
}

// take returns the progress to write, if one is due (once), or the end.
func (run *migrationRun) take() (prog *vmv1.MigrateProgress, ended bool, err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.ended {
		return nil, true, run.err
	}
	if run.due {
		run.due = false
		return run.latest, false, nil
	}
	return nil, false, nil
}

// startMigrate calls Migrate in a goroutine under ctx, the agent's
// lifetime: stopping crimux cancels it (the VM API then aborts, and the
// VM stays here), as does the pod's deletion (forgetMigration).
func (r *reconciler) startMigrate(ctx context.Context, p *pass, tgt kubeapi.MigrationTarget, to string) *migrationRun {
	ctx, cancel := context.WithCancel(ctx)
	run := &migrationRun{token: tgt.Token, target: to, cancel: cancel}
	key := p.podKey()
	req := &vmv1.MigrateRequest{Vm: p.ref, Target: targetMessage(tgt)}
	progress := func(m *vmv1.MigrateProgress) {
		if ctx.Err() == nil && run.progress(m, r.now()) {
			r.nudge(key)
		}
	}
	r.running.Go(func() {
		defer cancel()
		err := r.vms.MigrateFollowing(ctx, req, progress)
		run.end(err)
		r.nudge(key)
	})
	return run
}

// nudge asks for a pass over the pod key soon.
func (r *reconciler) nudge(key string) {
	if r.enqueue != nil {
		r.enqueue(key)
	}
}
