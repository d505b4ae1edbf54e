package libvirt

import (
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// TestAgentCallsCounted: the runtime's Counters hear of the agent call
// slots' refusals, by cap and reason, and of every call's wait.
func TestAgentCallsCounted(t *testing.T) {
	slots := virt.NewAgentSlots(virt.AgentCaps{PerVM: 1, PerNode: 8, Wait: 20 * time.Millisecond})
	counters := &coretest.Counters{}
	countAgentCalls(slots, counters)
	countAgentCalls(slots, nil) // no Counters: the reports stay
	release, err := slots.Take("crimux-a")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := slots.Take("crimux-a"); err == nil {
		t.Fatal("a call past a full per-VM cap let through")
	}
	if n := counters.Events("agent_refused vm stuck"); n != 1 {
		t.Errorf("%d refusals counted at the VM's cap, stuck; want 1", n)
	}
	if waits := counters.Timed("agent_wait"); len(waits) != 2 || waits[1] < 20*time.Millisecond {
		t.Errorf("waits %v: want the call let through and the refused one (at least 20ms)", waits)
	}
}
