package instant

import (
	"context"
	"sync"
	"time"
)

// Limits are the Maker's bounds, which a config reload changes while it
// runs (SetLimits). A field at 0 is its default.
type Limits struct {
	// MaxMaking bounds the templates made at once on the node (0 is
	// DefaultMaxMaking); MaxKept the templates kept (0 is
	// DefaultMaxKept): beyond it the least recently used one no clone
	// waits for is removed before another is made. RetryAfter is how
	// long a failed template stays failed (0 is DefaultRetryAfter).
	MaxMaking  int
	MaxKept    int
	RetryAfter time.Duration
	// CPUMillis is the CPU quota of a template's VM, in thousandths of a
	// CPU (cpu.max of its cgroup); 0: none.
	CPUMillis int64
}

// withDefaults is l with each field at 0 given its default (CPUMillis
// has none: 0 is no quota).
func (l Limits) withDefaults() Limits {
	if l.MaxMaking <= 0 {
		l.MaxMaking = DefaultMaxMaking
	}
	if l.MaxKept <= 0 {
		l.MaxKept = DefaultMaxKept
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = DefaultRetryAfter
	}
	return l
}

// SetLimits makes l the Maker's bounds from now on: a making under way
// keeps its turn (a lowered MaxMaking starts no other until fewer are
// made; a raised one lets waiting warms through at once), the next
// template made keeps MaxKept and gets CPUMillis (a template VM running
// keeps its quota), a failed template may be made again once RetryAfter
// has passed since it failed.
func (m *Maker) SetLimits(l Limits) {
	m.limMu.Lock()
	m.Limits = l
	m.limMu.Unlock()
	m.turns.changed()
}

// limits are the bounds in force, defaults applied.
func (m *Maker) limits() Limits {
	m.limMu.Lock()
	defer m.limMu.Unlock()
	return m.Limits.withDefaults()
}

// turns are the turns to make a template: at most the Maker's MaxMaking
// taken at once.
type turns struct {
	mu    sync.Mutex
	taken int
	// freed is closed, and replaced, when a turn is given back or the
	// bound changes.
	freed chan struct{}
}

// try takes a turn if fewer than limit are taken; else it returns a
// channel closed when that may have changed.
func (t *turns) try(limit int) (bool, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.taken < limit {
		t.taken++
		return true, nil
	}
	if t.freed == nil {
		t.freed = make(chan struct{})
	}
	return false, t.freed
}

// wait takes a turn once fewer than limit() are taken, or returns ctx's
// error.
func (t *turns) wait(ctx context.Context, limit func() int) error {
	for {
		ok, freed := t.try(limit())
		if ok {
			return nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives a turn back.
func (t *turns) give() {
	t.mu.Lock()
	t.taken--
	t.mu.Unlock()
	t.changed()
}

// changed wakes whoever waits for a turn.
func (t *turns) changed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed != nil {
		close(t.freed)
		t.freed = nil
	}
}
