// Package nospace owns the VMs qemu paused on a full disk. qemu's
// default for a disk write that finds no space (werror=enospc) is to
// pause the guest, not to fail the write to it, which a guest's
// filesystem takes as a broken disk. So a VM on a full state dir pauses;
// crimux says so (its log, its CRI status, crimux's log) and resumes it
// once the state dir has room again (core's RequireRoom reserve), looking
// every recheck. The guest's clock jumps, nothing is lost. A VM whose
// root disk is on a volume that is full stays paused until its user
// resumes it: a volume's room is not crimux's to judge.
package nospace

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// ReasonPaused is the CRI status reason of a VM paused on a full disk
// (the container stays CONTAINER_RUNNING, as for a user's pause).
const ReasonPaused = "PausedNoSpace"

// recheck is how often a VM paused on a full disk is looked at.
const recheck = 5 * time.Second

// Core is what the VMs paused on a full disk use of the VM runtime's
// core (core.Runtime).
type Core interface {
	// LockContainer locks the pod of VM id and reads its record.
	LockContainer(id string) (*store.Container, func(), error)
	// DomainOf is the libvirt connection and domain of VM c.
	DomainOf(c *store.Container) (virt.Libvirt, virt.Domain, error)
	// RequireRoom errs while the state dir has less than its reserve
	// free.
	RequireRoom(what string) error
	// Note writes a line of crimux's into VM id's log.
	Note(id, msg string)
}

// VMs are the VMs paused on a full disk, by domain, since when.
type VMs struct {
	Core Core
	Log  *slog.Logger
	// StateDir is the directory whose room is awaited, named in what
	// the user is told.
	StateDir string

	mu    sync.Mutex
	since map[string]time.Time
}

// OnPaused records that qemu paused domain on a write that found no
// space, and tells its user the first time.
func (n *VMs) OnPaused(domain string) {
	n.mu.Lock()
	if n.since == nil {
		n.since = map[string]time.Time{}
	}
	_, known := n.since[domain]
	n.since[domain] = time.Now()
	n.mu.Unlock()
	if known {
		return
	}
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	n.Log.Warn("VM paused by qemu: a write to its disk found no space", "container", id, "state_dir", n.StateDir)
	n.Core.Note(id, "the VM was paused: a write to its disk found the filesystem full; crimux resumes it once "+n.StateDir+" has room again")
}

// Paused reports whether VM domain is paused on a full disk, since when.
func (n *VMs) Paused(domain string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.since[domain]
	return t, ok
}

// Status is the CRI reason and message of VM domain while it is paused
// on a full disk.
func (n *VMs) Status(domain string) (reason, message string, ok bool) {
	since, ok := n.Paused(domain)
	if !ok {
		return "", "", false
	}
	return ReasonPaused, "qemu paused the VM at " + since.Format(time.RFC3339) + ": a write to its disk found the filesystem full; crimux resumes it once " +
		n.StateDir + " has room again", true
}

func (n *VMs) forget(domain string) {
	n.mu.Lock()
	delete(n.since, domain)
	n.mu.Unlock()
}

func (n *VMs) domains() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.since))
	for d := range n.since {
		out = append(out, d)
	}
	return out
}

// ResumeWhenRoom resumes the VMs paused on a full disk once the state
// dir has room, until ctx ends.
func (n *VMs) ResumeWhenRoom(ctx context.Context) {
	t := time.NewTicker(recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		doms := n.domains()
		if len(doms) == 0 || n.Core.RequireRoom("resume") != nil {
			continue
		}
		for _, d := range doms {
			n.resume(d)
		}
	}
}

// resume resumes one VM paused on a full disk, if libvirt still has it
// paused for that reason and its root disk is not a volume's.
func (n *VMs) resume(domain string) {
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	c, unlock, err := n.Core.LockContainer(id)
	if err != nil {
		n.forget(domain)
		return
	}
	defer unlock()
	if c.RootVolume != nil {
		return
	}
	l, dom, err := n.Core.DomainOf(c)
	if err != nil {
		return
	}
	st, err := l.State(dom)
	if err != nil {
		return
	}
	if st != virt.StatePaused || c.Power() != vmtypes.PowerRunning {
		n.forget(domain) // resumed, stopped or paused by its user since
		return
	}
	if err := l.Resume(dom); err != nil {
		n.Log.Warn("resume a VM paused on a full disk", "container", id, "err", err)
		return
	}
	n.forget(domain)
	n.Log.Info("VM resumed: its disk has room again", "container", id)
	n.Core.Note(id, "the VM was resumed: "+n.StateDir+" has room again")
}
