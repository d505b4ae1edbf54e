package podnet

import "sync"

// inflight keeps GC from releasing what an ADD or DEL is working on.
//
// A GC call names every attachment that is valid; one it omits loses its
// addresses. The list comes from the store, so an ADD that starts after
// the list was read and before the plugins ran would be omitted and its
// fresh address released under it. Hence: a GC round holds the registry
// for its whole length (list and plugin calls), every attachment with an
// ADD or DEL in flight when it starts is added to its list, and an ADD or
// DEL that wants to start meanwhile waits until the round is over.
type inflight struct {
	mu      sync.Mutex
	idle    *sync.Cond // signalled when a GC round ends
	ops     map[string]int
	running bool // a GC round holds the registry
}

func newInflight() *inflight {
	f := &inflight{ops: map[string]int{}}
	f.idle = sync.NewCond(&f.mu)
	return f
}

// begin registers an ADD or DEL of sandboxID, waiting for a GC round in
// progress; the caller calls the returned func when the plugin returned.
func (f *inflight) begin(sandboxID string) (end func()) {
	f.mu.Lock()
	for f.running {
		f.idle.Wait()
	}
	f.ops[sandboxID]++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.ops[sandboxID]--; f.ops[sandboxID] <= 0 {
			delete(f.ops, sandboxID)
		}
		f.mu.Unlock()
	}
}

// round runs one GC round: fn gets the sandboxes with an ADD or DEL in
// flight (each must be on its list), and no new one starts until fn
// returns. Rounds run one at a time.
func (f *inflight) round(fn func(busy []string) error) error {
	f.mu.Lock()
	for f.running {
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
		f.idle.Broadcast()
		f.mu.Unlock()
	}()
	return fn(busy)
}
