// Package vmidentity owns the VM pods' own identities: the range of uids
// and gids crimux hands them, the allocator that gives each pod (and each
// template being made) a number of its own and never one still held, and
// a VM's files given to its identity.
//
// Every VM pod's qemu runs as a user and a group of its own, numbers from
// a range crimux owns (libvirt.vm_id_base, vm_id_count) that no account of
// the host and no user namespace uses. The domain says so with a static
// DAC label (converter/vm: seclabel "+UID:+GID", relabel off), and crimux
// gives that identity the VM's own files itself: its root disk, its
// cloud-init ISO, its run/ directory, each 0600/0700. A compromised qemu
// thus runs as a uid no other process has: it cannot signal or ptrace
// another VM's qemu (the kernel asks for the same uid, and Debian has no
// Yama to ask more), read another's /proc, nor open another's files. What
// VMs share, an image's disk, kernel and initrd in the image cache, is
// root's and read-only (0444) under directories that cannot be listed.
//
// A pod's identity is recorded in its sandbox record before qemu ever runs
// as it, and is never reused while that record exists: a number is free
// again only once the pod's teardown has converged (its domain destroyed
// and undefined), so no process of an earlier owner is left.
package vmidentity

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Range is the uids and gids crimux hands VM pods: [Base+1,
// Base+Count). Base itself is never given (a margin against an off-by-one
// in an operator's subuid ranges). Count 0 turns identities off: every
// qemu runs as qemu.conf's user, as before.
type Range struct {
	Base, Count uint32
}

// Contains reports whether id is one of the range's.
func (r Range) Contains(id uint32) bool {
	return r.Count > 0 && id > r.Base && id-r.Base < r.Count
}

// Records are what the allocator reads and writes in the store
// (*store.Store): the pods' records, and the number given last.
type Records interface {
	Sandboxes() ([]*store.Sandbox, error)
	PutSandbox(sb *store.Sandbox) error
	LastIdentity() (uid uint32, ok bool, err error)
	SetLastIdentity(uid uint32) error
}

// Allocator hands out the range under one lock: two pods' CreateContainer
// run under different pod locks.
//
// The search for a free number goes on after the last number given,
// wrapping round the range, so a number just freed is the last to be
// given again: files a pod's identity was given outside crimux's
// directories (a volume's) may outlive it. That cursor is kept in the
// store (store.LastIdentity), written before the number is recorded in a
// pod's record, so that a crimux started again goes on after it too,
// rather than from the lowest free number, often the one freed last.
type Allocator struct {
	rg Range
	st Records
	// held are what hold uids outside the pods' records (templates being
	// made): no pod may be given one they return.
	held []func() []uint32

	mu sync.Mutex
	// loaded: next was read from the store.
	loaded bool
	// next is where the search for a free number starts (an offset into
	// the range, see pick).
	next uint32
}

// New hands out rg's numbers, none that st's pod records hold, nor any
// that a holder added by HeldBy holds.
func New(rg Range, st Records) *Allocator { return &Allocator{rg: rg, st: st} }

// HeldBy adds held to what holds numbers outside the pods' records: no
// pod is given one it returns, nor does Take give one.
func (a *Allocator) HeldBy(held func() []uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held = append(a.held, held)
}

// ErrNoneFree: every number of the range belongs to a pod.
var ErrNoneFree = errors.New("no free VM identity")

// Ensure gives pod sb its own uid and gid unless it has them (or
// identities are off), and records them in the pod's record before any
// file or process takes them. The caller holds the pod's lock.
func (a *Allocator) Ensure(sb *store.Sandbox) (*store.VMIdentity, error) {
	if sb.Identity != nil || a.rg.Count == 0 {
		return sb.Identity, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	id, err := a.pick()
	if err != nil {
		return nil, err
	}
	sb.Identity = &store.VMIdentity{UID: id, GID: id}
	if err := a.st.PutSandbox(sb); err != nil {
		sb.Identity = nil
		return nil, err
	}
	return sb.Identity, nil
}

// Take gives what is no pod (a template being made) a uid and gid of its
// own, nil where identities are off, and hands it to hold, which makes
// it held (by a holder of HeldBy's) before the next number is picked.
func (a *Allocator) Take(hold func(*store.VMIdentity)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var id *store.VMIdentity
	if a.rg.Count > 0 {
		uid, err := a.pick()
		if err != nil {
			return err
		}
		id = &store.VMIdentity{UID: uid, GID: uid}
	}
	hold(id)
	return nil
}

// used are the uids pods and the holders hold; the caller holds a.mu.
func (a *Allocator) used() (map[uint32]bool, error) {
	all, err := a.st.Sandboxes()
	if err != nil { // a record it cannot read may hold a number
		return nil, fmt.Errorf("read pod records to pick a VM identity: %w", err)
	}
	used := make(map[uint32]bool, len(all))
	for _, o := range all {
		if o.Identity != nil {
			used[o.Identity.UID] = true
		}
	}
	for _, held := range a.held {
		for _, uid := range held() {
			used[uid] = true
		}
	}
	return used, nil
}

func errNoneFree(rg Range) error {
	return fmt.Errorf("%w: all %d of libvirt.vm_id_count are in use: %w", ErrNoneFree, rg.Count-1, errdefs.ErrResourceExhausted)
}

// pick finds the first number of the range nobody holds, from next on,
// wrapping, and records it in the store as the last given (before the
// caller records it anywhere else: a crimux stopping in between skips a
// number, never gives one again early). The caller holds a.mu.
func (a *Allocator) pick() (uint32, error) {
	used, err := a.used()
	if err != nil {
		return 0, err
	}
	if !a.loaded {
		if err := a.load(used); err != nil {
			return 0, err
		}
	}
	rg := a.rg
	n := rg.Count - 1 // numbers Base+1 .. Base+Count-1
	for i := uint32(0); i < n; i++ {
		off := (a.next+i)%n + 1
		if !used[rg.Base+off] {
			if err := a.st.SetLastIdentity(rg.Base + off); err != nil {
				return 0, fmt.Errorf("record the VM identity given last: %w", err)
			}
			a.next = off % n
			return rg.Base + off, nil
		}
	}
	return 0, errNoneFree(rg)
}

// load sets next after the number given last, as the store recorded it;
// a store that recorded none (written by an older crimux, or rebuilt) or
// one outside the range (the range changed) goes on after the highest
// number of the range the records hold.
func (a *Allocator) load(used map[uint32]bool) error {
	last, ok, err := a.st.LastIdentity()
	if err != nil {
		return fmt.Errorf("read the VM identity given last: %w", err)
	}
	rg := a.rg
	if !ok || !rg.Contains(last) {
		last = 0
		for uid := range used {
			if rg.Contains(uid) && uid > last {
				last = uid
			}
		}
	}
	if last != 0 {
		a.next = (last - rg.Base) % (rg.Count - 1)
	}
	a.loaded = true
	return nil
}

// GiveTo makes path the VM's own: owned by its identity, group included;
// a nil identity (libvirt's shared qemu user) leaves it to libvirt. The
// path is one crimux made in a directory of root's, so no link is met.
func GiveTo(id *store.VMIdentity, path string) error {
	if id == nil {
		return nil
	}
	if err := os.Lchown(path, int(id.UID), int(id.GID)); err != nil {
		return fmt.Errorf("give %s to VM identity %d: %w", path, id.UID, err)
	}
	return nil
}
