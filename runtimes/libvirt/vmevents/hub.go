// Package vmevents owns the VM runtime's CRI container events fan-out:
// the Hub the life cycle publishes each change of a container to (its
// creation, start, stop, removal: core and the rooms above it build the
// event, Runtime.Event), and GetContainerEvents streams subscribe to.
package vmevents

import (
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Hub fans CRI container events out to GetContainerEvents streams.
type Hub struct {
	mu   sync.Mutex
	subs map[chan *runtimeapi.ContainerEventResponse]struct{}
}

// NewHub has no subscribers yet.
func NewHub() *Hub {
	return &Hub{subs: map[chan *runtimeapi.ContainerEventResponse]struct{}{}}
}

// Subscribe returns a stream of events and its cancel.
func (h *Hub) Subscribe() (chan *runtimeapi.ContainerEventResponse, func()) {
	ch := make(chan *runtimeapi.ContainerEventResponse, 64)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Publish never blocks: a slow subscriber loses events (kubelet's relist
// covers them), it does not stall the runtime.
func (h *Hub) Publish(ev *runtimeapi.ContainerEventResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}
