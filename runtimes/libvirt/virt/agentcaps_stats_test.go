package virt_test

import (
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// TestAgentSlotStats: the calls in flight on every VM, those waiting in
// line, and the caps with their defaults applied.
func TestAgentSlotStats(t *testing.T) {
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, Wait: time.Minute})
	if got := s.Stats(); got != (virt.AgentSlotStats{Caps: virt.AgentCaps{PerVM: 1, PerNode: virt.DefaultAgentCaps.PerNode, Wait: time.Minute}}) {
		t.Fatalf("idle slots: %+v", got)
	}
	relA, _ := s.Take("a")
	relB, _ := s.Take("b")
	done := make(chan struct{})
	go func() { // past a's cap: waits for relA
		if rel, err := s.Take("a"); err == nil {
			rel()
		}
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.Waiting() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := s.Stats(); got.InFlight != 2 || got.Waiting != 1 {
		t.Errorf("stats %+v; want 2 in flight, 1 waiting", got)
	}
	relA()
	<-done
	relB()
	if got := s.Stats(); got.InFlight != 0 || got.Waiting != 0 {
		t.Errorf("stats once all ended %+v; want none", got)
	}
}
