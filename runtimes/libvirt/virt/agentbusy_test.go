package virt

import (
	"errors"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// TestAgentCapBusyOrStuck: a full per-VM cap is busy (errdefs.ErrBusy, a
// caller may wait on) while the VM's agent answers calls, and stuck (a
// plain ResourceExhausted, refused) when it answered none within the
// caps' Wait; the node's cap is busy.
func TestAgentCapBusyOrStuck(t *testing.T) {
	t.Parallel()
	s := NewAgentSlots(AgentCaps{PerVM: 1, PerNode: 2, Wait: 50 * time.Millisecond})
	release, err := s.Take("stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := s.Take("stuck"); !errors.Is(err, errdefs.ErrResourceExhausted) || errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("a VM whose agent answered nothing, its cap full: %v; want ResourceExhausted, not busy", err)
	}

	answering, err := s.Take("answering")
	if err != nil {
		t.Fatal(err)
	}
	defer answering()
	s.answer("answering")
	if _, err := s.Take("answering"); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("a VM whose agent just answered, its cap full: %v; want busy", err)
	}
	if _, err := s.Take("third"); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("the node's cap full: %v; want busy", err)
	}
}
