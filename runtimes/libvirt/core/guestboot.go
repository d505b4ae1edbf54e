package core

import (
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
)

// Guest boots: a VM whose guest shows no sign of an operating system
// Options.GuestBootTimeout after a cold boot is reported stuck in its
// firmware or boot loader (bootwatch says how it is told): its CRI
// status's reason and message say so, a line in its log, a warning in
// crimux's, and Options.OnGuestBoot (the node agent's event on the pod).

// ReasonGuestNotBooted is the CRI status reason of a running VM whose
// guest showed no sign of an operating system in time.
const ReasonGuestNotBooted = "GuestNotBooted"

// DefaultGuestBootTimeout is Options.GuestBootTimeout's default: a Debian
// cloud guest under TCG shows itself in ~15 s, ~60 s in a nested node.
const DefaultGuestBootTimeout = 3 * time.Minute

// GuestBoot is what Options.OnGuestBoot hears about a VM pod's guest.
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

// bootReports turns a watch's findings into what a user sees.
type bootReports struct{ r *Runtime }

func (b bootReports) Stuck(id string, after time.Duration) {
	b.r.Counters.GuestBoot(vmcounters.BootStuck)
	msg := stuckMessage(after, b.r.Accel)
	b.r.Log.Warn("VM guest shows no operating system", "container", id, "after", after, "accel", b.r.Accel)
	b.r.note(id, msg)
	b.r.guestBootNotice(id, false, msg)
}

func (b bootReports) Booted(id, how string, after time.Duration, late bool) {
	b.r.Log.Info("VM guest booted", "container", id, "sign", how, "after", after, "late", late)
	if !late {
		b.r.Counters.GuestBoot(vmcounters.BootBooted)
		return
	}
	b.r.Counters.GuestBoot(vmcounters.BootLate)
	msg := fmt.Sprintf("the guest's operating system showed itself %s after the VM started (%s), later than %s",
		after, how, b.r.Boots.CurrentTimeout())
	b.r.note(id, msg)
	b.r.guestBootNotice(id, true, msg)
}

func stuckMessage(after time.Duration, accel string) string {
	msg := fmt.Sprintf("no sign of the guest's operating system %s after the VM started (no packet on its pod network, "+
		"its guest agent not connected): the guest is likely stuck in its firmware or boot loader", after)
	if accel == vm.AccelKVM {
		msg += "; if KVM does not run guests on this machine (nested virtualization), set accel = \"tcg\""
	}
	return msg
}

// note writes a line of crimux's into VM id's log (kubectl logs).
func (r *Runtime) note(id, msg string) {
	c, err := r.Store.Container(id)
	if err != nil {
		return
	}
	if err := r.Console.Note(id, c.LogPath, "crimux: "+msg); err != nil {
		r.Log.Warn("write a note into the VM's log", "container", id, "err", err)
	}
}

func (r *Runtime) guestBootNotice(id string, booted bool, msg string) {
	r.podNotice(id, GuestBoot{Booted: booted, Message: msg})
}

// StartNotice tells VM id's log and its pod's events how it started:
// reason is the event's, msg the line and the event's message.
func (r *Runtime) StartNotice(id, reason, msg string) {
	r.note(id, msg)
	r.podNotice(id, GuestBoot{Reason: reason, Message: msg})
}

func (r *Runtime) podNotice(id string, n GuestBoot) {
	if r.Opts.OnGuestBoot == nil {
		return
	}
	c, err := r.Store.Container(id)
	if err != nil {
		return
	}
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return
	}
	n.Pod = sb.Config.GetMetadata()
	r.Opts.OnGuestBoot(n)
}

// WatchBoot watches a VM that was just cold-booted (fresh) or found
// running at start-up (since is then when it started) for its guest's
// first sign. A fresh boot counts the packets sent from then on; a VM
// found running counts every packet its pod's tap carried (what was sent
// before crimux started is not known to be of this boot, but a guest
// that sent any booted once: not reported stuck after a restart).
func (r *Runtime) WatchBoot(c *store.Container, since time.Time, fresh bool) {
	r.Boots.Watch(c.ID, since, r.guestSign(c, fresh))
}

// guestSign is the boot watch's look at VM c: a packet from the guest
// since the watch began, or its agent's channel connected.
func (r *Runtime) guestSign(c *store.Container, fresh bool) bootwatch.Sign {
	id, domain, sandbox := c.ID, c.Domain, c.SandboxID
	base, baseKnown := uint64(0), !fresh
	return func() (string, bool) {
		if sb, err := r.Store.Sandbox(sandbox); err == nil && sb.Net != nil && r.Net != nil {
			if n, err := r.Net.GuestPackets(sb.Net); err == nil {
				if !baseKnown {
					base, baseKnown = n, true
				} else if n > base {
					return "a packet on its pod network", true
				}
			} else {
				r.Log.Debug("boot watch: guest packets", "container", id, "err", err)
			}
		}
		if r.agentConnected(domain) {
			return "its guest agent connected", true
		}
		return "", false
	}
}

// agentConnected: libvirt reports the guest agent's channel connected
// (the agent opened its virtio-serial port in the guest).
func (r *Runtime) agentConnected(domain string) bool {
	l, err := r.Conn.Get()
	if err != nil {
		return false
	}
	d, err := l.Lookup(domain)
	if err != nil {
		return false
	}
	x, err := l.XML(d)
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

// bootStatus is the CRI reason and message of a running VM whose guest
// is reported stuck.
func (r *Runtime) bootStatus(c *store.Container) (reason, message string, ok bool) {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", "", false
	}
	since, stuck := r.Boots.Stuck(c.ID)
	if !stuck {
		return "", "", false
	}
	return ReasonGuestNotBooted, stuckMessage(time.Since(since).Round(time.Second), r.Accel), true
}
