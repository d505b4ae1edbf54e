package core

import (
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		why    virt.StopReason
		code   int32
		reason string
	}{
		{virt.StopShutdown, ExitClean, "Completed"},
		{virt.StopCrashed, ExitCrashed, "Crashed"},
		{virt.StopFailed, ExitCrashed, "Crashed"},
		{virt.StopDestroyed, ExitKilled, "Killed"},
		{virt.StopSaved, ExitKilled, "Killed"},
		{virt.StopOther, ExitKilled, "Killed"},
		{virt.StopMigrated, ExitClean, "Migrated"},
	} {
		if code, reason := exitOf(tc.why); code != tc.code || reason != tc.reason {
			t.Errorf("exitOf(%d) = %d %q, want %d %q", tc.why, code, reason, tc.code, tc.reason)
		}
	}
}

// TestEventHub: every subscriber gets every event; a full subscriber
// loses events instead of blocking the publisher; a cancelled one gets
// none.
func TestEventHub(t *testing.T) {
	h := NewEventHub()
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

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if len(a) != 32 || a == b {
		t.Fatalf("NewID: %q, %q; want 32 hex digits, different", a, b)
	}
	if !store.ValidID(a) || !store.ValidID(b) {
		t.Fatalf("NewID minted %q, %q, which ValidID refuses", a, b)
	}
	for _, id := range []string{"", "c1", a[:31], a + "0", strings.ToUpper(a), "../../../../etc/passwd00000000000", a[:31] + "g", a[:31] + "/"} {
		if store.ValidID(id) {
			t.Errorf("store.ValidID(%q) = true", id)
		}
	}
}
