package bootwatch

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
)

// Guest boots: a VM whose guest shows no sign of an operating system
// the Watcher's Timeout after a cold boot is reported stuck in its
// firmware or boot loader: its CRI status's reason and message say so, a
// line in its log, a warning in crimux's, and the runtime's OnGuestBoot
// (the node agent's event on the pod). Guests are that half of the
// watch, the VM runtime's: its VMs' signs read, what the watch found told.

// ReasonGuestNotBooted is the CRI status reason of a running VM whose
// guest showed no sign of an operating system in time.
const ReasonGuestNotBooted = "GuestNotBooted"

// DefaultTimeout is the runtime's default guest boot timeout
// (core.Options.GuestBootTimeout): a Debian cloud guest under TCG shows
// itself in ~15 s, ~60 s in a nested node.
const DefaultTimeout = 3 * time.Minute

// What a watch found, as counted (Counters): the guest booted in time,
// late (after it was reported stuck), or stuck.
const (
	ResultBooted = "booted"
	ResultLate   = "late"
	ResultStuck  = "stuck"
)

// GuestBoot is what the runtime's OnGuestBoot hears about a VM pod's
// guest.
type GuestBoot struct {
	// Pod names the VM's pod (namespace, name, uid).
	Pod *runtimeapi.PodSandboxMetadata
	// Booted: the guest showed itself after it was reported stuck;
	// false: it is stuck.
	Booted  bool
	Message string
	// Reason, when set, is no boot watch's finding but how the VM
	// started: a Normal event of that reason.
	Reason string
}

// Host is what the guests' watch uses of the VM runtime (its core).
type Host interface {
	// GuestPackets counts the packets the guest of pod sandbox sent on
	// its pod network; counted is false when there is nothing to count
	// (no such pod, no pod network).
	GuestPackets(sandbox string) (n uint64, counted bool, err error)
	// DomainXML is the live definition of libvirt's domain.
	DomainXML(domain string) (string, error)
	// Note writes a line of crimux's into VM id's log (kubectl logs).
	Note(id, msg string)
	// Notice tells VM id's pod (the runtime's OnGuestBoot).
	Notice(id string, n GuestBoot)
}

// Counters count what a watch found (ResultBooted, ResultLate,
// ResultStuck).
type Counters interface{ GuestBoot(result string) }

// Guests watch the VM runtime's cold-booted guests: Watcher's watches
// look at a VM's signs, and what they find reaches its user.
type Guests struct {
	Watcher  *Watcher
	Host     Host
	Counters Counters
	Log      *slog.Logger
	// Accel is the VMs' accelerator (kvm or tcg): a stuck guest's
	// message says what to do when KVM does not run guests here.
	Accel string
}

// NewGuests makes the guests' watch: its Watcher (Timeout: timeout)
// reports to them.
func NewGuests(timeout time.Duration, host Host, counters Counters, accel string, log *slog.Logger) *Guests {
	g := &Guests{Host: host, Counters: counters, Accel: accel, Log: log}
	g.Watcher = &Watcher{Timeout: timeout, Reports: reports{g}}
	return g
}

// reports turns a watch's findings into what a user sees.
type reports struct{ g *Guests }

func (b reports) Stuck(id string, after time.Duration) {
	b.g.Counters.GuestBoot(ResultStuck)
	msg := stuckMessage(after, b.g.Accel)
	b.g.Log.Warn("VM guest shows no operating system", "container", id, "after", after, "accel", b.g.Accel)
	b.g.Host.Note(id, msg)
	b.g.Host.Notice(id, GuestBoot{Message: msg})
}

func (b reports) Booted(id, how string, after time.Duration, late bool) {
	b.g.Log.Info("VM guest booted", "container", id, "sign", how, "after", after, "late", late)
	if !late {
		b.g.Counters.GuestBoot(ResultBooted)
		return
	}
	b.g.Counters.GuestBoot(ResultLate)
	msg := fmt.Sprintf("the guest's operating system showed itself %s after the VM started (%s), later than %s",
		after, how, b.g.Watcher.CurrentTimeout())
	b.g.Host.Note(id, msg)
	b.g.Host.Notice(id, GuestBoot{Booted: true, Message: msg})
}

func stuckMessage(after time.Duration, accel string) string {
	msg := fmt.Sprintf("no sign of the guest's operating system %s after the VM started (no packet on its pod network, "+
		"its guest agent not connected): the guest is likely stuck in its firmware or boot loader", after)
	if accel == vm.AccelKVM {
		msg += "; if KVM does not run guests on this machine (nested virtualization), set accel = \"tcg\""
	}
	return msg
}

// Watch watches VM id (its domain, its pod sandbox) that was just
// cold-booted (fresh) or found running at start-up (since is then when
// it started) for its guest's first sign. A fresh boot counts the
// packets sent from then on; a VM found running counts every packet its
// pod's tap carried (what was sent before crimux started is not known to
// be of this boot, but a guest that sent any booted once: not reported
// stuck after a restart).
func (g *Guests) Watch(id, domain, sandbox string, since time.Time, fresh bool) {
	g.Watcher.Watch(id, since, g.sign(id, domain, sandbox, fresh))
}

// sign is the boot watch's look at VM id: a packet from the guest since
// the watch began, or its agent's channel connected.
func (g *Guests) sign(id, domain, sandbox string, fresh bool) Sign {
	base, baseKnown := uint64(0), !fresh
	return func() (string, bool) {
		if n, counted, err := g.Host.GuestPackets(sandbox); counted && err == nil {
			if !baseKnown {
				base, baseKnown = n, true
			} else if n > base {
				return "a packet on its pod network", true
			}
		} else if counted {
			g.Log.Debug("boot watch: guest packets", "container", id, "err", err)
		}
		if g.agentConnected(domain) {
			return "its guest agent connected", true
		}
		return "", false
	}
}

// agentConnected: libvirt reports the guest agent's channel connected
// (the agent opened its virtio-serial port in the guest).
func (g *Guests) agentConnected(domain string) bool {
	x, err := g.Host.DomainXML(domain)
	if err != nil || !strings.Contains(x, vm.AgentChannel) {
		return false
	}
	var def libvirtxml.Domain
	if def.Unmarshal(x) != nil || def.Devices == nil {
		return false
	}
	for _, ch := range def.Devices.Channels {
		if t := ch.Target; t != nil && t.VirtIO != nil && t.VirtIO.Name == vm.AgentChannel {
			return t.VirtIO.State == "connected"
		}
	}
	return false
}

// Status is the CRI reason and message of running VM id while its guest
// is reported stuck.
func (g *Guests) Status(id string) (reason, message string, ok bool) {
	since, stuck := g.Watcher.Stuck(id)
	if !stuck {
		return "", "", false
	}
	return ReasonGuestNotBooted, stuckMessage(time.Since(since).Round(time.Second), g.Accel), true
}
