package core

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// What crimux tells a VM's user besides its CRI status: a line in the
// VM's log, an event on its pod (Options.OnGuestBoot); and the runtime's
// side of the guests' boot watch (bootwatch.Guests), which tells both.

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

// StartNotice tells VM id's log and its pod's events how it started:
// reason is the event's, msg the line and the event's message.
func (r *Runtime) StartNotice(id, reason, msg string) {
	r.note(id, msg)
	r.podNotice(id, bootwatch.GuestBoot{Reason: reason, Message: msg})
}

func (r *Runtime) podNotice(id string, n bootwatch.GuestBoot) {
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
// first sign (bootwatch.Guests.Watch).
func (r *Runtime) WatchBoot(c *store.Container, since time.Time, fresh bool) {
	r.guests.Watch(c.ID, c.Domain, c.SandboxID, since, fresh)
}

// bootStatus is the CRI reason and message of a running VM whose guest
// is reported stuck.
func (r *Runtime) bootStatus(c *store.Container) (reason, message string, ok bool) {
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", "", false
	}
	return r.guests.Status(c.ID)
}

// bootHost is what the guests' boot watch reads and tells through.
type bootHost struct{ r *Runtime }

func (h bootHost) GuestPackets(sandbox string) (uint64, bool, error) {
	sb, err := h.r.Store.Sandbox(sandbox)
	if err != nil || sb.Net == nil || h.r.Networks.Net == nil {
		return 0, false, nil
	}
	n, err := h.r.Networks.Net.GuestPackets(sb.Net)
	return n, true, err
}

func (h bootHost) DomainXML(domain string) (string, error) {
	l, err := h.r.Conn.Get()
	if err != nil {
		return "", err
	}
	d, err := l.Lookup(domain)
	if err != nil {
		return "", err
	}
	return l.XML(d)
}

func (h bootHost) Note(id, msg string)                     { h.r.note(id, msg) }
func (h bootHost) Notice(id string, n bootwatch.GuestBoot) { h.r.podNotice(id, n) }
