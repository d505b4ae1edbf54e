package gc

import (
	"sync"
	"time"
)

// period is the collector's period, changed by a config reload while
// the collector runs.
type period struct {
	mu      sync.Mutex
	every   time.Duration
	changed chan struct{} // closed and replaced at each change
}

// get is the period and a channel closed when it changes.
func (p *period) get(initial time.Duration) (time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	every := p.every
	if every <= 0 {
		every = initial
	}
	if every <= 0 {
		every = DefaultGCInterval
	}
	return every, p.changed
}

func (p *period) set(every time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.every = every
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// SetInterval makes every the collector's period from now on (0 is
// DefaultGCInterval): the next pass comes every after the change.
func (r *Collector) SetInterval(every time.Duration) {
	if every <= 0 {
		every = DefaultGCInterval
	}
	r.period.set(every)
}
