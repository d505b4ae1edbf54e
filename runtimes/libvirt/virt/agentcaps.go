package virt

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// A guest-agent call holds one of libvirtd's workers for as long as the
// guest takes to answer: libvirtd runs one agent command per domain at a
// time (its agent job) and the others wait for it in their workers, up to
// libvirt's 30 s job timeout, and one the guest never answers lasts the
// call's timeout. libvirtd has few workers (max_workers, 20 by default)
// for all its clients: a guest whose agent never answers, with parallel
// kubectl execs or exec probes, held them all, and every other VM's
// define, start and stop queued behind it. So crimux bounds the agent
// calls it has in flight, per VM and for the node; a call past either
// bound waits in crimux, not in libvirtd, for one to end (at most
// AgentCaps.Wait) and is refused after that (ResourceExhausted; busy,
// errdefs.ErrBusy, when the calls filling the cap are being answered:
// an exec's start then asks again for as long as its request lives); an
// agent call also never uses the shared connection's request slots
// (remote.AgentCommand). Waiting matters under load: 100 kubectl execs
// into a few VMs poll their commands' status and fill the caps for
// moments at a time, and were refused at once (bench phase load: 4,875
// refusals in a minute).

// AgentCaps bound the guest-agent calls in flight ([libvirt]
// agent_calls_per_vm and agent_calls_per_node); 0 is the default. Wait
// is how long a call past a cap waits for a slot before it is refused.
type AgentCaps struct {
	PerVM, PerNode int
	Wait           time.Duration
}

// DefaultAgentCaps: four calls per VM are one running and three waiting
// for it in libvirtd, each at most one agent timeout (5 s for an exec's
// calls) behind the one before, within libvirt's 30 s job timeout; eight
// for the node leave libvirtd's other 12 default workers to crimux's
// shared connection (5 requests at once, libvirtd's max_client_requests),
// its starts, stops and saves on connections of their own, and other
// clients (virsh). Two VMs with stuck agents fill the node's cap: the
// execs of others are refused, retryable, while their lifecycle goes on.
// A call waits up to 3 s for a slot: an exec's calls take tens of
// milliseconds when agents answer, and a VM whose agent does not answer
// holds its slots for 5 s a call, so the callers behind it still hear
// why within seconds.
var DefaultAgentCaps = AgentCaps{PerVM: 4, PerNode: 8, Wait: 3 * time.Second}

// AgentSlots count the agent calls in flight against their caps. Shared
// by every connection of a Conn, so calls still in flight on a lost
// connection keep counting until they return. A call past a cap waits
// in line: a slot given back goes to the first waiting call it lets
// through, and wakes that call alone. Waking every waiting call for each
// slot (100 kubectl execs in line for 8 slots) cost crimux thousands of
// goroutine wake-ups a second, which delayed every other call it served
// (kubelet's status polls) behind them in Go's run queues.
type AgentSlots struct {
	caps AgentCaps
	mu   sync.Mutex
	node int
	vms  map[string]int
	// answered is when each VM with calls in flight last answered one:
	// a full per-VM cap whose agent answers is busy, not stuck.
	answered map[string]time.Time
	// line are the calls waiting for a slot, first come first.
	line []*slotWaiter
	// reports hear of each call's wait and refusal (agentcaps_reports.go).
	reports slotReports
}

// slotWaiter is a call waiting in line for a slot to domain's agent;
// granted is closed once a slot was taken for it (ok set, under mu).
type slotWaiter struct {
	domain  string
	granted chan struct{}
	ok      bool
}

// NewAgentSlots counts against caps (a 0 field is its default's).
func NewAgentSlots(caps AgentCaps) *AgentSlots {
	return &AgentSlots{caps: caps.orDefaults(), vms: map[string]int{}, answered: map[string]time.Time{}}
}

// orDefaults is caps with each 0 field its default's.
func (caps AgentCaps) orDefaults() AgentCaps {
	if caps.PerVM <= 0 {
		caps.PerVM = DefaultAgentCaps.PerVM
	}
	if caps.PerNode <= 0 {
		caps.PerNode = DefaultAgentCaps.PerNode
	}
	if caps.Wait <= 0 {
		caps.Wait = DefaultAgentCaps.Wait
	}
	return caps
}

// Caps are the caps counted against.
func (s *AgentSlots) Caps() AgentCaps {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caps
}

// SetCaps counts against caps from now on (a config reload): the calls
// in flight keep their slots, the waiting calls that the new caps let
// through go at once, and a lowered cap refuses new calls until enough
// of those in flight end.
func (s *AgentSlots) SetCaps(caps AgentCaps) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caps = caps.orDefaults()
	s.grant()
}

// InFlight is how many calls are in flight to domain's agent and on the
// node.
func (s *AgentSlots) InFlight(domain string) (vm, node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vms[domain], s.node
}

// Waiting is how many calls wait in line for a slot.
func (s *AgentSlots) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.line)
}

// Take reserves a slot for a call to domain's agent, released by the
// function it returns (once); past a cap it waits in line for a slot up
// to the caps' Wait, then refuses the call, naming the cap.
func (s *AgentSlots) Take(domain string) (release func(), err error) {
	defer s.reports.waited(time.Now())
	// The VM is busy, not stuck, if it answered a call from one Wait
	// before this one until the refusal.
	s.mu.Lock()
	wait := s.caps.Wait
	busySince := time.Now().Add(-wait)
	if s.fits(domain) {
		s.take(domain)
		s.mu.Unlock()
		return s.releaser(domain), nil
	}
	w := &slotWaiter{domain: domain, granted: make(chan struct{})}
	s.line = append(s.line, w)
	s.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.granted:
		return s.releaser(domain), nil
	case <-timer.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.ok { // granted as the timer fired
		return s.releaser(domain), nil
	}
	// Not granted: no slot given back since let this call through, so a
	// cap is still full for it.
	s.line = slices.DeleteFunc(s.line, func(o *slotWaiter) bool { return o == w })
	return nil, s.refused(domain, s.full(domain, busySince))
}

// fits says whether a call to domain would pass no cap now; s.mu is held.
func (s *AgentSlots) fits(domain string) bool {
	return s.vms[domain] < s.caps.PerVM && s.node < s.caps.PerNode
}

// take counts a call to domain in; s.mu is held.
func (s *AgentSlots) take(domain string) {
	s.vms[domain]++
	s.node++
}

// releaser gives domain's slot back, once however often it is called.
func (s *AgentSlots) releaser(domain string) func() {
	var once sync.Once
	return func() { once.Do(func() { s.give(domain) }) }
}

// full says which cap a call to domain passes now; s.mu is held. A full
// per-VM cap is busy (errdefs.ErrBusy: worth waiting for) if the VM's
// agent answered a call after busySince, and stuck otherwise; the node's
// is busy with whatever fills it (a stuck VM holds at most its own cap
// of it).
func (s *AgentSlots) full(domain string, busySince time.Time) error {
	if s.vms[domain] >= s.caps.PerVM {
		class := errdefs.ErrResourceExhausted
		if s.answered[domain].After(busySince) {
			class = errdefs.ErrBusy
		}
		return fmt.Errorf("guest-agent call to %s refused: %d calls to its agent are in flight, the per-VM cap "+
			"(libvirt.agent_calls_per_vm = %d), after %v waiting for one to end; retry once they end: %w",
			domain, s.vms[domain], s.caps.PerVM, s.caps.Wait, class)
	}
	return fmt.Errorf("guest-agent call to %s refused: %d guest-agent calls are in flight on this node, the per-node cap "+
		"(libvirt.agent_calls_per_node = %d), after %v waiting for one to end; retry once they end: %w",
		domain, s.node, s.caps.PerNode, s.caps.Wait, errdefs.ErrBusy)
}

// answer records that domain's agent answered a call.
func (s *AgentSlots) answer(domain string) {
	s.mu.Lock()
	s.answered[domain] = time.Now()
	s.mu.Unlock()
}

func (s *AgentSlots) give(domain string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.node--
	if s.vms[domain]--; s.vms[domain] <= 0 {
		delete(s.vms, domain)
		delete(s.answered, domain) // consulted only while its cap is full
	}
	s.grant()
}

// grant takes slots for the waiting calls the caps now let through, in
// the order they came (one whose VM's cap is full does not hold up a
// call to another VM behind it), and wakes each; s.mu is held.
func (s *AgentSlots) grant() {
	kept := s.line[:0]
	for _, w := range s.line {
		if !s.fits(w.domain) {
			kept = append(kept, w)
			continue
		}
		s.take(w.domain)
		w.ok = true
		close(w.granted)
	}
	clear(s.line[len(kept):])
	s.line = kept
}

// CapAgentCalls is l with its guest-agent calls counted against slots.
func CapAgentCalls(l Libvirt, slots *AgentSlots) Libvirt { return agentCapped{l, slots} }

// agentCapped is a Libvirt whose agent calls take a slot first. It stays
// comparable (callers compare connections).
type agentCapped struct {
	Libvirt
	slots *AgentSlots
}

func (a agentCapped) AgentCommand(d Domain, cmd string, timeout time.Duration) (string, error) {
	release, err := a.slots.Take(d.Name)
	if err != nil {
		return "", err
	}
	defer release()
	answer, err := a.Libvirt.AgentCommand(d, cmd, timeout)
	if err == nil {
		a.slots.answer(d.Name)
	}
	return answer, err
}
