package virt

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// AgentSlotReports hear what the slots did with each call, for metrics.
// Either may be nil.
type AgentSlotReports struct {
	// Refused hears of a call refused after waiting: the cap that stayed
	// full ("vm" or "node") and why ("busy": the calls filling it are
	// being answered; "stuck": the VM's agent answered none lately), as
	// the refusal's error says. It runs under the slots' lock: it must be
	// quick and must not call back into the slots.
	Refused func(whichCap, reason string)
	// Waited hears how long each call waited for a slot, let through or
	// refused (about nothing for one let through at once).
	Waited func(time.Duration)
}

// Report hands s's waits and refusals to r from now on, in place of
// those handed before.
func (s *AgentSlots) Report(r AgentSlotReports) { s.reports.p.Store(&r) }

// slotReports are the reports in force, read without the slots' lock.
type slotReports struct {
	p atomic.Pointer[AgentSlotReports]
}

// waited reports a call's wait for a slot, which began at since.
func (sr *slotReports) waited(since time.Time) {
	if r := sr.p.Load(); r != nil && r.Waited != nil {
		r.Waited(time.Since(since))
	}
}

// refused reports the refusal err of a call to domain, the cap it names
// and whether it is busy, and returns err; s.mu is held.
func (s *AgentSlots) refused(domain string, err error) error {
	r := s.reports.p.Load()
	if r == nil || r.Refused == nil {
		return err
	}
	whichCap, reason := "node", "stuck"
	if s.vms[domain] >= s.caps.PerVM { // as full names it
		whichCap = "vm"
	}
	if errors.Is(err, errdefs.ErrBusy) {
		reason = "busy"
	}
	r.Refused(whichCap, reason)
	return err
}
