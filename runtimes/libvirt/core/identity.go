package core

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

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

// IdentityRange is the uids and gids crimux hands VM pods: [Base+1,
// Base+Count). Base itself is never given (a margin against an off-by-one
// in an operator's subuid ranges). Count 0 turns identities off: every
// qemu runs as qemu.conf's user, as before.
type IdentityRange struct {
	Base, Count uint32
}

// Contains reports whether id is one of the range's.
func (r IdentityRange) Contains(id uint32) bool {
	return r.Count > 0 && id > r.Base && id-r.Base < r.Count
}

// identities hands out the range under one lock: two pods' CreateContainer
// run under different pod locks.
//
// The search for a free number goes on after the last number given,
// wrapping round the range, so a number just freed is the last to be
// given again: files a pod's identity was given outside crimux's
// directories (a volume's) may outlive it. That cursor is kept in the
// store (store.LastIdentity), written before the number is recorded in a
// pod's record, so that a crimux started again goes on after it too,
// rather than from the lowest free number, often the one freed last.
type identities struct {
	mu sync.Mutex
	// loaded: next was read from the store.
	loaded bool
	// next is where the search for a free number starts (an offset into
	// the range, see pick).
	next uint32
}

// ErrNoIdentity: every number of the range belongs to a pod.
var ErrNoIdentity = errors.New("no free VM identity")

// EnsureIdentity gives pod sb its own uid and gid unless it has them (or
// identities are off), and records them in the pod's record before any
// file or process takes them. The caller holds the pod's lock.
func (r *Runtime) EnsureIdentity(sb *store.Sandbox) (*store.VMIdentity, error) {
	rg := r.Opts.Identities
	if sb.Identity != nil || rg.Count == 0 {
		return sb.Identity, nil
	}
	r.ids.mu.Lock()
	defer r.ids.mu.Unlock()
	used, err := r.usedIdentities()
	if err != nil {
		return nil, err
	}
	id, err := r.ids.pick(r.Store, rg, used)
	if err != nil {
		return nil, err
	}
	sb.Identity = &store.VMIdentity{UID: id, GID: id}
	if err := r.Store.PutSandbox(sb); err != nil {
		sb.Identity = nil
		return nil, err
	}
	return sb.Identity, nil
}

// usedIdentities are the uids pods and templates being made hold; the
// caller holds r.ids.mu.
func (r *Runtime) usedIdentities() (map[uint32]bool, error) {
	all, err := r.Store.Sandboxes()
	if err != nil { // a record it cannot read may hold a number
		return nil, fmt.Errorf("read pod records to pick a VM identity: %w", err)
	}
	used := make(map[uint32]bool, len(all))
	for _, o := range all {
		if o.Identity != nil {
			used[o.Identity.UID] = true
		}
	}
	for _, uid := range r.templateIdentities() {
		used[uid] = true
	}
	return used, nil
}

func errNoIdentity(rg IdentityRange) error {
	return fmt.Errorf("%w: all %d of libvirt.vm_id_count are in use: %w", ErrNoIdentity, rg.Count-1, errdefs.ErrResourceExhausted)
}

// pick finds the first number of rg not in used, from next on, wrapping,
// and records it in st as the last given (before the caller records it
// anywhere else: a crimux stopping in between skips a number, never
// gives one again early). The caller holds ids.mu.
func (ids *identities) pick(st *store.Store, rg IdentityRange, used map[uint32]bool) (uint32, error) {
	if !ids.loaded {
		if err := ids.load(st, rg, used); err != nil {
			return 0, err
		}
	}
	n := rg.Count - 1 // numbers Base+1 .. Base+Count-1
	for i := uint32(0); i < n; i++ {
		off := (ids.next+i)%n + 1
		if !used[rg.Base+off] {
			if err := st.SetLastIdentity(rg.Base + off); err != nil {
				return 0, fmt.Errorf("record the VM identity given last: %w", err)
			}
			ids.next = off % n
			return rg.Base + off, nil
		}
	}
	return 0, errNoIdentity(rg)
}

// load sets next after the number given last, as the store recorded it;
// a store that recorded none (written by an older crimux, or rebuilt) or
// one outside rg (the range changed) goes on after the highest number
// of rg its records hold.
func (ids *identities) load(st *store.Store, rg IdentityRange, used map[uint32]bool) error {
	last, ok, err := st.LastIdentity()
	if err != nil {
		return fmt.Errorf("read the VM identity given last: %w", err)
	}
	if !ok || !rg.Contains(last) {
		last = 0
		for uid := range used {
			if rg.Contains(uid) && uid > last {
				last = uid
			}
		}
	}
	if last != 0 {
		ids.next = (last - rg.Base) % (rg.Count - 1)
	}
	ids.loaded = true
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
