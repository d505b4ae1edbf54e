package cri

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
)

// fanOut calls list on every backend concurrently and merges the results in
// registry order (primary first). The first error wins; callers decide
// whether a failing backend may be answered from cache (see listFromAll).
func fanOut[T any](ctx context.Context, backends []*registry.Runtime, list func(context.Context, *registry.Runtime) ([]T, error)) ([]T, error) {
	if len(backends) == 1 { // the common case: no goroutine
		items, err := list(ctx, backends[0])
		return items, runtimeErr(backends[0], err)
	}
	results := make([][]T, len(backends))
	errs := make([]error, len(backends))
	var wg sync.WaitGroup
	for i, rt := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = list(ctx, rt)
		}()
	}
	wg.Wait()
	var merged []T
	for i := range backends {
		if errs[i] != nil {
			return nil, runtimeErr(backends[i], errs[i])
		}
		merged = append(merged, results[i]...)
	}
	return merged, nil
}

// listTimeout bounds how long a list waits for a non-primary runtime
// before answering from its cache: a hung VM runtime must not stall
// kubelet's relist of every pod on the node.
const listTimeout = 10 * time.Second

// listCache keeps each backend's last complete (unfiltered) list of pods or
// containers. When a backend cannot be reached its last known items are
// served instead of none: a pod missing from a list is a pod kubelet
// recreates, which is the restart storm crimux exists to prevent.
//
// A list passed through (list_raw.go) keeps its answer encoded: it is
// decoded only if it is ever served.
type listCache[T any] struct {
	mu    sync.Mutex
	items map[string]cached[T]
}

type cached[T any] struct {
	items  []T
	raw    mem.BufferSlice           // the items encoded, if decode is set (a reference of the cache's own)
	decode func([]byte) ([]T, error) // decodes raw
	at     time.Time
}

func newListCache[T any]() *listCache[T] {
	return &listCache[T]{items: map[string]cached[T]{}}
}

func (c *listCache[T]) put(backend string, items []T) {
	c.set(backend, cached[T]{items: items, at: time.Now()})
}

// putRaw keeps backend's list as the buffers of its answer, with a
// reference of its own: they are sent on and freed meanwhile.
func (c *listCache[T]) putRaw(backend string, raw mem.BufferSlice, decode func([]byte) ([]T, error)) {
	raw.Ref()
	c.set(backend, cached[T]{raw: raw, decode: decode, at: time.Now()})
}

// set replaces backend's entry and frees the buffers of the one before.
func (c *listCache[T]) set(backend string, e cached[T]) {
	c.mu.Lock()
	old := c.items[backend]
	c.items[backend] = e
	c.mu.Unlock()
	old.raw.Free()
}

func (c *listCache[T]) get(backend string) ([]T, time.Time, bool) {
	c.mu.Lock()
	e, ok := c.items[backend]
	var raw []byte
	if ok && e.decode != nil {
		raw = e.raw.Materialize() // a copy, before a newer answer frees them
	}
	c.mu.Unlock()
	if !ok || e.decode == nil {
		return e.items, e.at, ok
	}
	items, err := e.decode(raw)
	return items, e.at, err == nil
}

// listFromAll fans list out over backends. A backend that fails with
// Unavailable is answered from cache (filtered by match) when it has one;
// without a cache the whole list fails, so kubelet retries rather than
// seeing pods vanish. unfiltered says whether the results may refresh the
// cache.
func listFromAll[T any](ctx context.Context, s *Server, backends []*registry.Runtime, cache *listCache[T], unfiltered bool,
	list func(context.Context, *registry.Runtime) ([]T, error), match func(T) bool) ([]T, error) {
	return fanOut(ctx, backends, func(ctx context.Context, rt *registry.Runtime) ([]T, error) {
		lctx := ctx
		if !rt.Primary {
			var cancel context.CancelFunc
			lctx, cancel = context.WithTimeout(ctx, listTimeout)
			defer cancel()
		}
		items, err := list(lctx, rt)
		if err == nil {
			if unfiltered {
				cache.put(rt.Name, items)
			}
			return items, nil
		}
		return lastKnown(ctx, s, rt, cache, match, err)
	})
}

// lastKnown is rt's last known items that match, when err says rt could
// not be reached (or not in time) and its items are known; err otherwise.
func lastKnown[T any](ctx context.Context, s *Server, rt *registry.Runtime, cache *listCache[T], match func(T) bool, err error) ([]T, error) {
	old, at, ok := cache.get(rt.Name)
	if !ok || !(isUnavailable(err) || (errdefs.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil)) {
		return nil, err
	}
	s.logger(ctx).Warn("runtime unavailable: serving its last known items",
		"runtime", rt.Name, "since", at.Format(time.RFC3339), "err", err)
	return keep(old, match), nil
}
