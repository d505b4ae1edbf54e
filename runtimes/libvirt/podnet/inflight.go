package podnet

import (
	"sync"

	"golang.org/x/sys/unix"
)

// inflight keeps GC from releasing what an ADD or DEL is working on.
//
// A GC call names every attachment that is valid; one it omits loses its
// addresses. The list comes from the store, so an ADD that starts after
// the list was read and before the plugins ran would be omitted and its
// fresh address released under it. Hence: a GC round holds the registry
// for its whole length (list and plugin calls), every attachment with an
// ADD or DEL in flight when it starts is added to its list, and an ADD or
// DEL that wants to start meanwhile waits until the round is over.
//
// Across the host's crimuxes, the same order through host (hostlock.go):
// read-locked while calls are in flight, write-locked by a round.
type inflight struct {
	mu      sync.Mutex
	idle    *sync.Cond // signalled when a GC round ends or the host lock is taken
	ops     map[string]int
	calls   int  // ADDs and DELs in flight
	running bool // a GC round holds the registry
	taking  bool // the first call in flight is taking the host lock
	host    *hostLock
}

func newInflight(host *hostLock) *inflight {
	f := &inflight{ops: map[string]int{}, host: host}
	f.idle = sync.NewCond(&f.mu)
	return f
}

// begin registers an ADD or DEL of sandboxID, waiting for a GC round in
// progress (this crimux's or another's); the caller calls the returned
// func when the plugin returned.
func (f *inflight) begin(sandboxID string) (end func()) {
	f.mu.Lock()
	for f.running || f.taking {
		f.idle.Wait()
	}
	f.ops[sandboxID]++
	if f.calls++; f.calls == 1 {
		f.taking = true
		f.mu.Unlock()
		_ = f.host.set(unix.F_RDLCK) // an error: no host lock, as without one
		f.mu.Lock()
		f.taking = false
		f.idle.Broadcast()
	}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.ops[sandboxID]--; f.ops[sandboxID] <= 0 {
			delete(f.ops, sandboxID)
		}
		if f.calls--; f.calls == 0 && !f.running {
			_ = f.host.set(unix.F_UNLCK)
		}
		f.mu.Unlock()
	}
}

// round runs one GC round: fn gets the sandboxes with an ADD or DEL in
// flight (each must be on its list), and no new one starts until fn
// returns. Rounds run one at a time; one that would deadlock with another
// crimux's is skipped with errGCDeadlock.
func (f *inflight) round(fn func(busy []string) error) error {
	f.mu.Lock()
	for f.running || f.taking {
		f.idle.Wait()
	}
	f.running = true
	busy := make([]string, 0, len(f.ops))
	for id := range f.ops {
		busy = append(busy, id)
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running = false
		// Back to what the calls in flight hold (never waits).
		if f.calls > 0 {
			_ = f.host.set(unix.F_RDLCK)
		} else {
			_ = f.host.set(unix.F_UNLCK)
		}
		f.idle.Broadcast()
		f.mu.Unlock()
	}()
	if err := f.host.set(unix.F_WRLCK); err != nil {
		return err
	}
	return fn(busy)
}
