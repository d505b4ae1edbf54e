package virt

import (
	"sync"
	"testing"
	"time"
)

// slotEvents records what AgentSlots report.
type slotEvents struct {
	mu      sync.Mutex
	refused map[string]int
	waits   []time.Duration
}

func (e *slotEvents) reports() AgentSlotReports {
	return AgentSlotReports{
		Refused: func(whichCap, reason string) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.refused[whichCap+" "+reason]++
		},
		Waited: func(d time.Duration) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.waits = append(e.waits, d)
		},
	}
}

// TestAgentSlotReports: each refusal is reported with the cap its error
// names and whether it is busy or stuck; every call's wait is reported,
// a call let through at once and a refused one (about the caps' Wait).
func TestAgentSlotReports(t *testing.T) {
	t.Parallel()
	const wait = 50 * time.Millisecond
	s := NewAgentSlots(AgentCaps{PerVM: 1, PerNode: 2, Wait: wait})
	ev := &slotEvents{refused: map[string]int{}}
	s.Report(ev.reports())
	stuck, err := s.Take("stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck()
	_, _ = s.Take("stuck") // its VM's cap, no answer: stuck
	answering, err := s.Take("answering")
	if err != nil {
		t.Fatal(err)
	}
	defer answering()
	s.answer("answering")
	_, _ = s.Take("answering") // its VM's cap, answered: busy
	_, _ = s.Take("third")     // the node's cap: busy

	ev.mu.Lock()
	defer ev.mu.Unlock()
	for what, n := range map[string]int{"vm stuck": 1, "vm busy": 1, "node busy": 1, "node stuck": 0} {
		if ev.refused[what] != n {
			t.Errorf("refusals %q: %d, want %d (all: %v)", what, ev.refused[what], n, ev.refused)
		}
	}
	if len(ev.waits) != 5 {
		t.Fatalf("%d waits reported, want 5 (every call): %v", len(ev.waits), ev.waits)
	}
	if ev.waits[0] >= wait || ev.waits[1] < wait {
		t.Errorf("waits %v: want the first call let through at once, the second refused after %s", ev.waits, wait)
	}
}

// TestAgentSlotsReportNothing: slots with no reports refuse as before.
func TestAgentSlotsReportNothing(t *testing.T) {
	t.Parallel()
	s := NewAgentSlots(AgentCaps{PerVM: 1, PerNode: 1, Wait: time.Millisecond})
	release, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := s.Take("a"); err == nil {
		t.Fatal("a call past a full cap let through")
	}
	s.Report(AgentSlotReports{}) // nil funcs
	if _, err := s.Take("a"); err == nil {
		t.Fatal("a call past a full cap let through")
	}
}
