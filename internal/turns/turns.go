// Package turns serves a burst of calls in the order they came, a few at
// a time, so that the first ones finish first.
//
// Fifty VM pods created at once each run CNI plugins, qemu-img and a
// libvirt define: work of a few tens of milliseconds of CPU each. Run all
// together on two cores, the kernel shares the CPU among them and every
// one of them finishes at the end, about a second later: no VM could
// start before the last pod's network was up. Taken in turns, the first
// pod is ready after its own few milliseconds, its VM starts while the
// others are still being prepared, and the last finishes no later than
// before.
package turns

import (
	"context"
	"time"
)

// Gate lets at most its width of callers hold a turn at once; the others
// wait in the order they came (a Go channel's waiting senders are served
// first in, first out). A nil Gate gives every caller a turn at once.
type Gate struct {
	slots chan struct{}
	// maxWait bounds a caller's wait: turns order a burst, they must not
	// become a wall behind a step that hangs (a CNI plugin that never
	// answers holds its turn until its caller's deadline).
	maxWait time.Duration
}

// New is a gate of width turns (at least 1), where no caller waits longer
// than maxWait before it goes ahead anyway.
func New(width int, maxWait time.Duration) *Gate {
	return &Gate{slots: make(chan struct{}, max(width, 1)), maxWait: maxWait}
}

// Take waits for a turn and returns the function that ends it, to be
// called once. After maxWait the caller goes ahead without a turn (its
// done does nothing); when ctx ends first, Take returns ctx's error.
func (g *Gate) Take(ctx context.Context) (done func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	select { // a free turn: no timer
	case g.slots <- struct{}{}:
		return g.release, nil
	default:
	}
	timer := time.NewTimer(g.maxWait)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		return g.release, nil
	case <-timer.C:
		return func() {}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *Gate) release() { <-g.slots }
