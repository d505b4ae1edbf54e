package vmimage

import (
	"context"
	"sync"
)

// A caller of Prepare uses the entry's files after Prepare returns, but
// records that use (the VM runtime's container record, with the entry's
// digest) only a moment later. Until then no record names the entry, and
// a collection that ran in between would remove files a VM is about to be
// made of. So Prepare holds the entry for its caller, under the entry's
// lock, and Collect, under the same lock, leaves a held entry alone. The
// hold lasts as long as the call that prepared the image: until the end
// of its hold scope (WithHoldScope) or, without one, until its context is
// done. By then the call has written its record, which keeps the entry
// from then on, or has failed and undone what it made.

// holds counts the holds on each cache entry.
type holds struct {
	mu sync.Mutex
	n  map[string]int
}

// add takes a hold on key and returns its release, which may be called
// more than once.
func (h *holds) add(key string) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.n[key]--; h.n[key] <= 0 {
				delete(h.n, key)
			}
		})
	}
}

// held reports whether key has a hold.
func (h *holds) held(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key] > 0
}

// holdScope collects the releases of the holds taken in one call.
type holdScope struct {
	mu       sync.Mutex
	releases []func()
	ended    bool
}

type holdScopeKey struct{}

// WithHoldScope returns a context in which the cache entries Prepare
// returns stay held until end is called, rather than until the context is
// done. A gRPC handler wraps its call in one: its context is canceled
// when the client gives up, but the handler works on, and writes its
// record, after that.
func WithHoldScope(ctx context.Context) (_ context.Context, end func()) {
	s := &holdScope{}
	return context.WithValue(ctx, holdScopeKey{}, s), s.end
}

// releaseWith ties a hold's release to the end of ctx's hold scope or,
// without one, to ctx being done (never, for a context that cannot be).
func releaseWith(ctx context.Context, release func()) {
	if s, ok := ctx.Value(holdScopeKey{}).(*holdScope); ok {
		s.add(release)
		return
	}
	context.AfterFunc(ctx, release)
}

func (s *holdScope) add(release func()) {
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.releases = append(s.releases, release)
	}
	s.mu.Unlock()
	if ended {
		release()
	}
}

func (s *holdScope) end() {
	s.mu.Lock()
	rs := s.releases
	s.releases, s.ended = nil, true
	s.mu.Unlock()
	for _, release := range rs {
		release()
	}
}
