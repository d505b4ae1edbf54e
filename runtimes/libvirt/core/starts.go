package core

import (
	"fmt"
	"slices"
	"sync"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Starts are the qemu starts crimux has asked libvirt for and that are
// still in flight. The placement server grants a new qemu process its
// VM's cgroup (and the VM's files: its tap) only for one of them, once:
// a compromised qemu running the wrapper with a neighbour's name finds no
// grant, its neighbour running or not.
type Starts struct {
	mu     sync.Mutex
	grants map[string][]*startGrant
}

type startGrant struct{ used bool }

// Arm opens a grant for one new qemu of domain while the libvirt call
// that starts it runs; done closes it, used or not.
func (s *Starts) Arm(domain string) (done func()) {
	g := &startGrant{}
	s.mu.Lock()
	if s.grants == nil {
		s.grants = map[string][]*startGrant{}
	}
	s.grants[domain] = append(s.grants[domain], g)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.grants[domain] = slices.DeleteFunc(s.grants[domain], func(x *startGrant) bool { return x == g })
		if len(s.grants[domain]) == 0 {
			delete(s.grants, domain)
		}
	}
}

// Take uses an open grant of domain; false if there is none.
func (s *Starts) Take(domain string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.grants[domain] {
		if !g.used {
			g.used = true
			return true
		}
	}
	return false
}

// RootDisks is the room of the VMs' root disks (package rootdisk), as
// a start asks it: CheckRootDisk refuses to start VM c when its root
// disk is not the one crimux made (a header qemu rewrote, a volume that
// holds no disk any more) and gives a root volume to the VM's identity.
type RootDisks interface {
	CheckRootDisk(c *store.Container) error
}

// checkRootDisk is r.RootDisks' check. A runtime wired without them
// starts no qemu: the check is what keeps a rewritten disk header from
// reaching qemu, so its absence fails closed.
func (r *Runtime) checkRootDisk(c *store.Container) error {
	if r.RootDisks == nil {
		return fmt.Errorf("%w: VM %s: no root disk check is wired into this runtime", errdefs.ErrFailedPrecondition, c.ID)
	}
	return r.RootDisks.CheckRootDisk(c)
}

// StartingQemu runs start, a libvirt call that starts a new qemu process
// of VM c (a start, a restore, a snapshot revert), with a grant open for
// that qemu's placement, once the VM's root disk still names only what
// crimux made it over (RootDisks).
func (r *Runtime) StartingQemu(c *store.Container, start func() error) error {
	if err := r.checkRootDisk(c); err != nil {
		return err
	}
	if r.Opts.Identities.Count > 0 && r.Opts.PlacementSocket != "" { // a host, not a unit test
		if err := hostcaps.OpenLibvirtDirs(hostcaps.LibvirtDirs); err != nil {
			return fmt.Errorf("let VM identities reach libvirt's per-domain files: %w", err)
		}
	}
	defer r.Starts.Arm(c.Domain)()
	return start()
}

// ArmIncoming opens the grant for the qemu that an incoming live
// migration starts for VM c, as StartingQemu does for a
// start, until disarm: the target's libvirtd starts that qemu whenever
// the source's asks.
func (r *Runtime) ArmIncoming(c *store.Container) (disarm func(), err error) {
	if err := r.checkRootDisk(c); err != nil {
		return nil, err
	}
	if r.Opts.Identities.Count > 0 && r.Opts.PlacementSocket != "" {
		if err := hostcaps.OpenLibvirtDirs(hostcaps.LibvirtDirs); err != nil {
			return nil, fmt.Errorf("let VM identities reach libvirt's per-domain files: %w", err)
		}
	}
	return r.Starts.Arm(c.Domain), nil
}
