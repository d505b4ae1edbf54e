package opguard

import "log/slog"

// Rollback undoes the steps of a half-done operation, last first: a small
// stack instead of one deferred cleanup per step.
type Rollback struct {
	steps []rollbackStep
}

type rollbackStep struct {
	what string
	undo func() error
}

// Add records how to undo a step.
func (r *Rollback) Add(what string, undo func() error) {
	r.steps = append(r.steps, rollbackStep{what, undo})
}

// Run undoes the recorded steps, last first.
func (r *Rollback) Run(log *slog.Logger) {
	for i := len(r.steps) - 1; i >= 0; i-- {
		if err := r.steps[i].undo(); err != nil {
			log.Error("Rollback step failed", "step", r.steps[i].what, "err", err)
		}
	}
}
