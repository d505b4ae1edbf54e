package virt_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

// stuckAgents are guests whose agents answer only when told to: each
// call waits in the fake's AgentCommand, as a call to an agent that does
// not answer waits in libvirtd.
type stuckAgents struct {
	answer  chan struct{}
	mu      sync.Mutex
	waiting int
}

func (s *stuckAgents) agent(string) (string, error) {
	s.mu.Lock()
	s.waiting++
	s.mu.Unlock()
	<-s.answer
	s.mu.Lock()
	s.waiting--
	s.mu.Unlock()
	return `{"return":{}}`, nil
}

func (s *stuckAgents) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// define defines name on f.
func define(t *testing.T, f *virtfake.Libvirt, name string) virt.Domain {
	t.Helper()
	d, err := f.Define("<domain type='qemu'><name>" + name + "</name></domain>")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runningWithAgent defines and starts name on f with agent.
func runningWithAgent(t *testing.T, f *virtfake.Libvirt, name string, agent func(string) (string, error)) virt.Domain {
	t.Helper()
	d := define(t, f, name)
	if err := f.Start(d); err != nil {
		t.Fatal(err)
	}
	f.Edit(name, func(dd *virtfake.Domain) { dd.Agent = agent })
	d, err := f.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestAgentCallsAreCapped: agent calls past the per-VM or the per-node
// cap wait the caps' Wait and are refused (ResourceExhausted, naming the
// cap), while the
// admitted ones wait on a guest that does not answer; other calls of the
// connection (another VM's lifecycle) are not held; the slots come back
// when the calls end.
func TestAgentCallsAreCapped(t *testing.T) {
	t.Parallel()
	f := virtfake.New()
	stuck := &stuckAgents{answer: make(chan struct{})}
	a := runningWithAgent(t, f, "a", stuck.agent)
	b := runningWithAgent(t, f, "b", stuck.agent)
	slots := virt.NewAgentSlots(virt.AgentCaps{PerVM: 2, PerNode: 3, Wait: 50 * time.Millisecond})
	l := virt.CapAgentCalls(f, slots)

	var wg sync.WaitGroup
	admitted := func(d virt.Domain) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.AgentCommand(d, `{"execute":"guest-ping"}`, time.Second); err != nil {
				t.Errorf("admitted call to %s: %v", d.Name, err)
			}
		}()
	}
	waitStuck := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for stuck.count() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls wait on the agents, want %d", stuck.count(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	refused := func(d virt.Domain, words string) {
		t.Helper()
		start := time.Now()
		_, err := l.AgentCommand(d, `{"execute":"guest-ping"}`, time.Second)
		if errdefs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), words) || !strings.Contains(err.Error(), d.Name) {
			t.Fatalf("call to %s past the cap: %v (%s), want ResourceExhausted naming %s and %q", d.Name, err, errdefs.Code(err), d.Name, words)
		}
		if took := time.Since(start); took < 50*time.Millisecond || took > time.Second {
			t.Fatalf("a refusal took %v: it must wait the caps' 50 ms, no longer", took)
		}
	}

	admitted(a)
	admitted(a)
	waitStuck(2)
	refused(a, "per-VM cap (libvirt.agent_calls_per_vm = 2)")
	admitted(b)
	waitStuck(3)
	refused(b, "per-node cap (libvirt.agent_calls_per_node = 3)")
	if vm, node := slots.InFlight("a"); vm != 2 || node != 3 {
		t.Fatalf("in flight: %d to a, %d on the node; want 2 and 3", vm, node)
	}

	// Lifecycle calls of the connection go on meanwhile.
	c := define(t, f, "c")
	if err := l.Start(c); err != nil {
		t.Fatalf("another VM's start while agent calls wait: %v", err)
	}
	if err := l.Destroy(c); err != nil {
		t.Fatalf("another VM's destroy while agent calls wait: %v", err)
	}

	close(stuck.answer)
	wg.Wait()
	if vm, node := slots.InFlight("a"); vm != 0 || node != 0 {
		t.Fatalf("after the calls ended: %d to a, %d on the node in flight; want none", vm, node)
	}
	if _, err := l.AgentCommand(a, `{"execute":"guest-ping"}`, time.Second); err != nil {
		t.Fatalf("a call once the slots are back: %v", err)
	}
}

// TestAgentSlotsDefaults: a zero cap is its default, and a release given
// twice returns one slot.
func TestAgentSlotsDefaults(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{})
	if s.Caps() != virt.DefaultAgentCaps {
		t.Fatalf("caps %+v, want the defaults %+v", s.Caps(), virt.DefaultAgentCaps)
	}
	if d := virt.DefaultAgentCaps; d.PerVM < 1 || d.PerNode < d.PerVM || d.PerNode >= 20-5 {
		t.Fatalf("default caps %+v: want 1 <= per VM <= per node, and per node below libvirtd's 20 workers less the shared connection's 5 requests", d)
	}
	release, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Take("b")
	if err != nil {
		t.Fatal(err)
	}
	release()
	release()
	if vm, node := s.InFlight("b"); vm != 1 || node != 1 {
		t.Fatalf("after releasing a's slot twice: %d to b, %d on the node; want 1 and 1", vm, node)
	}
	other()
}

// TestAgentCallWaitsForASlot: a call past a cap gets the slot a call
// ending gives back, instead of being refused.
func TestAgentCallWaitsForASlot(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, PerNode: 1, Wait: 5 * time.Second})
	release, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, release)
	start := time.Now()
	second, err := s.Take("b")
	if err != nil {
		t.Fatalf("a call waiting for a slot: %v", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 2*time.Second {
		t.Fatalf("the slot came after %v, want about 100 ms", took)
	}
	second()
}

// waitWaiting waits until n calls wait in line for a slot of s.
func waitWaiting(t *testing.T, s *virt.AgentSlots, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); s.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait for a slot, want %d", s.Waiting(), n)
		}
	}
}

// TestAgentSlotsGoInLine: calls waiting for a slot get one in the order
// they came, one call for each slot given back (which wakes that call
// alone: waking them all for every slot cost crimux thousands of
// wake-ups a second under 100 kubectl execs, and the status calls it
// served waited behind them).
func TestAgentSlotsGoInLine(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 100, PerNode: 1, Wait: 10 * time.Second})
	release, err := s.Take("vm-0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	type slot struct {
		call    int
		release func()
	}
	got := make(chan slot, n)
	for i := range n {
		go func() {
			r, err := s.Take(fmt.Sprintf("vm-%d", i%3))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			got <- slot{i, r}
		}()
		waitWaiting(t, s, i+1)
	}
	release()
	for want := range n {
		g := <-got
		if g.call != want {
			t.Fatalf("call %d got the slot given back, want %d (the first in line)", g.call, want)
		}
		select {
		case other := <-got:
			t.Fatalf("calls %d and %d both got the one slot", g.call, other.call)
		case <-time.After(10 * time.Millisecond):
		}
		g.release()
	}
}

// TestAgentSlotsLineSkipsAFullVM: a call to a VM whose own cap is full
// does not hold up a call to another VM behind it in line.
func TestAgentSlotsLineSkipsAFullVM(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, PerNode: 2, Wait: 10 * time.Second})
	releaseA, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	releaseB, err := s.Take("b")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	for i, vm := range []string{"a", "c"} {
		go func() {
			r, err := s.Take(vm)
			if err != nil {
				t.Errorf("the call to %s: %v", vm, err)
				return
			}
			got <- vm
			defer r()
		}()
		waitWaiting(t, s, i+1)
	}
	releaseB()
	if vm := <-got; vm != "c" {
		t.Fatalf("the node's slot went to the call to %s, want c's (a's own cap is full)", vm)
	}
	releaseA()
	if vm := <-got; vm != "a" {
		t.Fatalf("a's slot went to %s", vm)
	}
}

// TestAgentSlotsRefusedAfterWaiting: a call still in line after Wait is
// refused, naming the cap, and leaves the line.
func TestAgentSlotsRefusedAfterWaiting(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, PerNode: 1, Wait: 50 * time.Millisecond})
	release, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := s.Take("b"); err == nil || !strings.Contains(err.Error(), "libvirt.agent_calls_per_node = 1") {
		t.Fatalf("a call past the node's cap after waiting: %v, want the cap named", err)
	}
	if n := s.Waiting(); n != 0 {
		t.Fatalf("%d calls left in line after the refusal", n)
	}
}

// TestAgentSlotsSetCaps: a raised cap lets a waiting call through at
// once; a lowered one refuses a new call while the calls in flight fill
// it, and the new caps name themselves in the refusal.
func TestAgentSlotsSetCaps(t *testing.T) {
	t.Parallel()
	s := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, PerNode: 8, Wait: 10 * time.Second})
	first, err := s.Take("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		release, err := s.Take("a")
		if err == nil {
			release()
		}
		got <- err
	}()
	waitWaiting(t, s, 1)
	s.SetCaps(virt.AgentCaps{PerVM: 2, PerNode: 8, Wait: 10 * time.Millisecond})
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting call after the cap was raised to 2: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiting call still waits after the per-VM cap was raised to 2")
	}
	if c := s.Caps(); c.PerVM != 2 || c.Wait != 10*time.Millisecond {
		t.Fatalf("Caps() = %+v after SetCaps", c)
	}
	s.SetCaps(virt.AgentCaps{PerVM: 1, PerNode: 8, Wait: 10 * time.Millisecond})
	if _, err := s.Take("a"); err == nil || !strings.Contains(err.Error(), "agent_calls_per_vm = 1") {
		t.Fatalf("a second call to a with the cap lowered to 1 and one in flight: %v, want refused naming the cap", err)
	}
	first()
	release, err := s.Take("a")
	if err != nil {
		t.Fatalf("a call once the one in flight ended: %v", err)
	}
	release()
}
