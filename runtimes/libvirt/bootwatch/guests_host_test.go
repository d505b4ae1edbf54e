package bootwatch

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/converter/vm"
)

// fakeHost is a VM runtime of one VM whose packets and domain XML the
// test sets.
type fakeHost struct {
	mu                 sync.Mutex
	packets            uint64
	counted            bool
	packetsErr, xmlErr error
	xml                string
}

func (h *fakeHost) GuestPackets(string) (uint64, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.packets, h.counted, h.packetsErr
}

func (h *fakeHost) DomainXML(string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.xml, h.xmlErr
}

func (h *fakeHost) Note(string, string)      {}
func (h *fakeHost) Notice(string, GuestBoot) {}

type noCount struct{}

func (noCount) GuestBoot(string) {}

func agentXML(state string) string {
	return `<domain type="kvm"><name>crimux-c1</name><devices><channel type="unix">` +
		`<target type="virtio" name="` + vm.AgentChannel + `" state="` + state + `"/></channel></devices></domain>`
}

// TestAgentConnected: the guest agent's channel connected in the live
// XML is a sign; disconnected, absent, unreadable or unparsable is none.
func TestAgentConnected(t *testing.T) {
	for _, tc := range []struct {
		name string
		xml  string
		err  error
		want bool
	}{
		{"connected", agentXML("connected"), nil, true},
		{"disconnected", agentXML("disconnected"), nil, false},
		{"no agent channel", `<domain type="kvm"><name>crimux-c1</name><devices/></domain>`, nil, false},
		{"no devices", `<domain type="kvm"><name>` + vm.AgentChannel + `</name></domain>`, nil, false},
		{"unparsable", "<domain " + vm.AgentChannel, nil, false},
		{"domain gone", "", errors.New("no domain"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGuests(time.Minute, &fakeHost{xml: tc.xml, xmlErr: tc.err}, noCount{}, vm.AccelTCG, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if got := g.agentConnected("crimux-c1"); got != tc.want {
				t.Fatalf("agentConnected = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGuestSign: a fresh boot's first count is its base, a packet more
// is a sign; a count that fails is no sign, nor a base; with no packets
// counted the agent's channel still tells.
func TestGuestSign(t *testing.T) {
	h := &fakeHost{packets: 5, counted: true, xml: agentXML("disconnected")}
	g := NewGuests(time.Minute, h, noCount{}, vm.AccelTCG, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sign := g.sign("c1", "crimux-c1", "p1", true)
	if how, seen := sign(); seen {
		t.Fatalf("a sign (%s) at the base count", how)
	}
	h.mu.Lock()
	h.packets, h.packetsErr = 9, errors.New("tap gone")
	h.mu.Unlock()
	if how, seen := sign(); seen {
		t.Fatalf("a sign (%s) from a count that failed", how)
	}
	h.mu.Lock()
	h.packetsErr = nil
	h.mu.Unlock()
	if how, seen := sign(); !seen || how != "a packet on its pod network" {
		t.Fatalf("sign %q %v, want a packet", how, seen)
	}

	h2 := &fakeHost{xml: agentXML("connected")}
	g2 := NewGuests(time.Minute, h2, noCount{}, vm.AccelTCG, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if how, seen := g2.sign("c1", "crimux-c1", "p1", false)(); !seen || how != "its guest agent connected" {
		t.Fatalf("sign %q %v, want the agent", how, seen)
	}
}

// TestStuckMessage: under KVM the message says what to do when KVM does
// not run guests (nested virtualization); under TCG it does not.
func TestStuckMessage(t *testing.T) {
	const hint = `set accel = "tcg"`
	if m := stuckMessage(time.Minute, vm.AccelKVM); !strings.Contains(m, hint) || !strings.Contains(m, "1m0s after the VM started") {
		t.Fatalf("KVM: %q", m)
	}
	if m := stuckMessage(time.Minute, vm.AccelTCG); strings.Contains(m, hint) {
		t.Fatalf("TCG: %q", m)
	}
}
