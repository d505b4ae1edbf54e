package libvirt

import "log/slog"

// rollback undoes the steps of a half-done operation, last first: a small
// stack instead of one deferred cleanup per step.
type rollback struct {
	steps []rollbackStep
}

type rollbackStep struct {
	what string
	undo func() error
}

func (r *rollback) add(what string, undo func() error) {
	r.steps = append(r.steps, rollbackStep{what, undo})
}

func (r *rollback) run(log *slog.Logger) {
	for i := len(r.steps) - 1; i >= 0; i-- {
		if err := r.steps[i].undo(); err != nil {
			log.Error("rollback step failed", "step", r.steps[i].what, "err", err)
		}
	}
}
