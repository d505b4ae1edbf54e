// Package route carries one gRPC call's routing decision in its context:
// the name of the runtime the call was routed to. The code that routes a
// call (the CRI server, the VM API) records it; the metrics interceptor,
// which runs outside those handlers and so cannot see their results,
// gives the call a slot before the handler runs and reads it afterwards.
// Routing is thereby decided once, by the code that acts on it, rather
// than re-derived from the request for labels.
package route

import (
	"context"
	"sync/atomic"
)

// Labels of calls that were not routed to one runtime.
const (
	// All: nothing was recorded. The call fans out to every runtime
	// (lists, Status, Version, event streams) or names none.
	All = "all"
	// None: the call names a runtime but routing it failed (an unknown
	// handler, an empty ID, no runtime of the workload type).
	None = "none"
)

type slotKey struct{}

// Slot receives the runtime of one call. Safe for concurrent use: a
// handler may record from goroutines of its own.
type Slot struct {
	runtime atomic.Pointer[string]
}

// With returns ctx carrying a fresh slot, and the slot.
func With(ctx context.Context) (context.Context, *Slot) {
	s := &Slot{}
	return context.WithValue(ctx, slotKey{}, s), s
}

// Record notes runtime as the runtime the call of ctx is routed to; a
// later record replaces an earlier one. Without a slot in ctx (a call no
// interceptor measures, as in tests) it does nothing.
func Record(ctx context.Context, runtime string) {
	if s, ok := ctx.Value(slotKey{}).(*Slot); ok {
		s.runtime.Store(&runtime)
	}
}

// Runtime returns the runtime recorded, All if none was.
func (s *Slot) Runtime() string {
	if r := s.runtime.Load(); r != nil {
		return *r
	}
	return All
}
