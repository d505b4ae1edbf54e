package core

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// A full disk under a running VM: qemu's default for a disk
// write that finds no space (werror=enospc) is to pause the guest, not
// to fail the write to it, which a guest's filesystem takes as a broken
// disk. So a VM on a full state dir pauses; crimux says so (its log, its
// CRI status, crimux's log) and resumes it once the state dir has room
// again (RequireRoom's reserve), looking every noSpaceRecheck. The
// guest's clock jumps, nothing is lost. A VM whose root disk is on a
// volume that is full stays paused until its user resumes it: a volume's
// room is not crimux's to judge.

// ReasonPausedNoSpace is the CRI status reason of a VM paused on a full
// disk (the container stays CONTAINER_RUNNING, as for a user's pause).
const ReasonPausedNoSpace = "PausedNoSpace"

// noSpaceRecheck is how often a VM paused on a full disk is looked at.
const noSpaceRecheck = 5 * time.Second

// NoSpace are the VMs paused on a full disk, by domain, since when.
type NoSpace struct {
	mu     sync.Mutex
	since  map[string]time.Time
	wakeup chan struct{}
}

func (n *NoSpace) paused(r *Runtime, domain string) {
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
	r.Log.Warn("VM paused by qemu: a write to its disk found no space", "container", id, "state_dir", r.Opts.StateDir)
	r.note(id, "the VM was paused: a write to its disk found the filesystem full; crimux resumes it once "+r.Opts.StateDir+" has room again")
}

// Paused reports whether VM domain is paused on a full disk, since when.
func (n *NoSpace) Paused(domain string) (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.since[domain]
	return t, ok
}

func (n *NoSpace) forget(domain string) {
	n.mu.Lock()
	delete(n.since, domain)
	n.mu.Unlock()
}

func (n *NoSpace) domains() []string {
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
func (r *Runtime) ResumeWhenRoom(ctx context.Context) {
	t := time.NewTicker(noSpaceRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		doms := r.NoSpace.domains()
		if len(doms) == 0 || r.RequireRoom("resume") != nil {
			continue
		}
		for _, d := range doms {
			r.resumeNoSpace(d)
		}
	}
}

// resumeNoSpace resumes one VM paused on a full disk, if libvirt still
// has it paused for that reason and its root disk is not a volume's.
func (r *Runtime) resumeNoSpace(domain string) {
	id := strings.TrimPrefix(domain, vm.DomainName(""))
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		r.NoSpace.forget(domain)
		return
	}
	defer unlock()
	if c.RootVolume != nil {
		return
	}
	l, dom, err := r.DomainOf(c)
	if err != nil {
		return
	}
	st, err := l.State(dom)
	if err != nil {
		return
	}
	if st != virt.StatePaused || c.Power() != vmtypes.PowerRunning {
		r.NoSpace.forget(domain) // resumed, stopped or paused by its user since
		return
	}
	if err := l.Resume(dom); err != nil {
		r.Log.Warn("resume a VM paused on a full disk", "container", id, "err", err)
		return
	}
	r.NoSpace.forget(domain)
	r.Log.Info("VM resumed: its disk has room again", "container", id)
	r.note(id, "the VM was resumed: "+r.Opts.StateDir+" has room again")
}
