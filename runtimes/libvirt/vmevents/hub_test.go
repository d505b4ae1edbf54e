package vmevents

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestHub: every subscriber gets every event; a full subscriber
// loses events instead of blocking the publisher; a cancelled one gets
// none.
func TestHub(t *testing.T) {
	h := NewHub()
	a, cancelA := h.Subscribe()
	b, cancelB := h.Subscribe()
	defer cancelA()
	ev := &runtimeapi.ContainerEventResponse{ContainerId: "c1"}
	h.Publish(ev)
	for name, ch := range map[string]chan *runtimeapi.ContainerEventResponse{"a": a, "b": b} {
		select {
		case got := <-ch:
			if got != ev {
				t.Fatalf("%s got %v", name, got)
			}
		default:
			t.Fatalf("%s got no event", name)
		}
	}
	cancelB()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range cap(a) + 10 { // more than a's buffer: a does not read
			h.Publish(ev)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if len(a) != cap(a) {
		t.Fatalf("a holds %d events, want its buffer full (%d)", len(a), cap(a))
	}
	if len(b) != 0 {
		t.Fatalf("a cancelled subscriber got %d events", len(b))
	}
}
