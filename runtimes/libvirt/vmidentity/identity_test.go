package vmidentity_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// putPod records pod id, with identity uid unless 0.
func putPod(t *testing.T, st *store.Store, id string, uid uint32) *store.Sandbox {
	t.Helper()
	sb := &store.Sandbox{ID: id, Handler: "vm"}
	if uid != 0 {
		sb.Identity = &store.VMIdentity{UID: uid, GID: uid}
	}
	if err := st.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// identityOf records pod and gives it its identity through a.
func identityOf(t *testing.T, a *vmidentity.Allocator, st *store.Store, pod string) uint32 {
	t.Helper()
	sb := putPod(t, st, pod, 0)
	id, err := a.Ensure(sb)
	if err != nil || id == nil {
		t.Fatalf("pod %s: identity %v, %v", pod, id, err)
	}
	if rec, err := st.Sandbox(pod); err != nil || rec.Identity == nil || *rec.Identity != *id {
		t.Fatalf("pod %s: record holds %+v (%v), want %+v", pod, rec.Identity, err, *id)
	}
	return id.UID
}

func removePod(t *testing.T, st *store.Store, pod string) {
	t.Helper()
	if err := st.DeleteSandbox(pod); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityAfterRestartIsNotTheOneFreed: the identity a crimux
// started again hands out comes after the last one handed out, not the
// lowest free: a number just freed (its pod's files perhaps still on a
// volume somewhere) is the last to be given again.
func TestIdentityAfterRestartIsNotTheOneFreed(t *testing.T) {
	const base = 500000
	rg := vmidentity.Range{Base: base, Count: 10}
	st := openStore(t)
	a := vmidentity.New(rg, st)
	for i, pod := range []string{"a", "b", "c"} {
		if uid := identityOf(t, a, st, pod); uid != base+1+uint32(i) {
			t.Fatalf("pod %s: uid %d, want %d", pod, uid, base+1+i)
		}
	}
	removePod(t, st, "c") // the one most recently freed
	restarted := vmidentity.New(rg, st)
	if uid := identityOf(t, restarted, st, "d"); uid != base+4 {
		t.Fatalf("after a restart, the next pod got uid %d, want %d (after the last given; %d was just freed)", uid, base+4, base+3)
	}
	// And the one freed before the restart is not given at the next one
	// either.
	removePod(t, st, "b")
	restarted = vmidentity.New(rg, st)
	if uid := identityOf(t, restarted, st, "e"); uid != base+5 {
		t.Fatalf("after a second restart, the next pod got uid %d, want %d", uid, base+5)
	}
}

// TestIdentityAfterRestartWraps: the search goes on after the last
// number given, wrapping round the range: the first free number after
// it, which a restart does not change.
func TestIdentityAfterRestartWraps(t *testing.T) {
	const base = 600000
	rg := vmidentity.Range{Base: base, Count: 5} // 600001..600004
	st := openStore(t)
	a := vmidentity.New(rg, st)
	for _, pod := range []string{"a", "b", "c", "d"} {
		identityOf(t, a, st, pod)
	}
	removePod(t, st, "a") // 600001
	removePod(t, st, "c") // 600003, freed last
	if uid := identityOf(t, vmidentity.New(rg, st), st, "e"); uid != base+1 {
		t.Fatalf("after a restart, the next pod got uid %d, want %d (wrapped past %d)", uid, base+1, base+4)
	}
	if uid := identityOf(t, vmidentity.New(rg, st), st, "f"); uid != base+3 {
		t.Fatalf("the next pod got uid %d, want %d", uid, base+3)
	}
}

// TestIdentityCursorOfAnOlderStore: a store that keeps no cursor (made
// by an older crimux, or rebuilt from the record copies) goes on after
// the highest identity its records hold, not from the lowest free; so
// does one whose cursor is outside the range (the range changed).
func TestIdentityCursorOfAnOlderStore(t *testing.T) {
	const base = 700000
	rg := vmidentity.Range{Base: base, Count: 10}
	for name, cursor := range map[string]uint32{"no cursor": 0, "a cursor outside the range": 42} {
		t.Run(name, func(t *testing.T) {
			st := openStore(t)
			if cursor != 0 {
				if err := st.SetLastIdentity(cursor); err != nil {
					t.Fatal(err)
				}
			}
			for i, pod := range []string{"a", "b", "c"} {
				putPod(t, st, pod, base+1+uint32(i))
			}
			putPod(t, st, "outside", 42) // another range's: no cursor
			removePod(t, st, "a")
			if uid := identityOf(t, vmidentity.New(rg, st), st, "d"); uid != base+4 {
				t.Fatalf("the next pod got uid %d, want %d (after the highest recorded)", uid, base+4)
			}
		})
	}
}

// TestIdentitiesOffOrKept: with identities off a pod gets none (and the
// store is not asked); a pod that has one keeps it.
func TestIdentitiesOffOrKept(t *testing.T) {
	off := vmidentity.New(vmidentity.Range{}, failing{})
	if id, err := off.Ensure(&store.Sandbox{ID: "a"}); id != nil || err != nil {
		t.Fatalf("identities off: %v, %v; want none", id, err)
	}
	if err := off.Take(func(id *store.VMIdentity) {
		if id != nil {
			t.Errorf("identities off: a template got %+v", id)
		}
	}); err != nil {
		t.Fatal(err)
	}
	on := vmidentity.New(vmidentity.Range{Base: 100, Count: 10}, failing{})
	own := &store.VMIdentity{UID: 105, GID: 105}
	if id, err := on.Ensure(&store.Sandbox{ID: "a", Identity: own}); id != own || err != nil {
		t.Fatalf("a pod with an identity: %v, %v; want its own", id, err)
	}
}

// TestIdentitiesRunOut: a full range is ResourceExhausted (ErrNoneFree),
// and a pod's number is free again once its record is gone.
func TestIdentitiesRunOut(t *testing.T) {
	st := openStore(t)
	a := vmidentity.New(vmidentity.Range{Base: 600000, Count: 2}, st) // one number
	identityOf(t, a, st, "a")
	b := putPod(t, st, "b", 0)
	_, err := a.Ensure(b)
	if !errors.Is(err, vmidentity.ErrNoneFree) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("second pod with one identity free: %v, want ErrNoneFree, ResourceExhausted", err)
	}
	if b.Identity != nil {
		t.Fatalf("a pod refused an identity holds %+v", b.Identity)
	}
	removePod(t, st, "a")
	if uid := identityOf(t, a, st, "b"); uid != 600001 {
		t.Fatalf("pod b after a's removal: uid %d, want 600001", uid)
	}
}

// TestTemplatesHoldTheirIdentities: what Take gives a template is held
// (by its holder, HeldBy) and given to nothing else; hold runs under the
// allocator's lock, before the next pick.
func TestTemplatesHoldTheirIdentities(t *testing.T) {
	const base = 800000
	rg := vmidentity.Range{Base: base, Count: 10}
	held := []uint32{base + 1} // a template's already
	heldNow := func() []uint32 { return held }
	a := vmidentity.New(rg, openStore(t))
	a.HeldBy(heldNow)
	if err := a.Take(func(id *store.VMIdentity) {
		if id == nil || id.UID != base+2 || id.GID != base+2 {
			t.Fatalf("template's identity %+v, want %d (%d is held)", id, base+2, base+1)
		}
		held = append(held, id.UID)
	}); err != nil {
		t.Fatal(err)
	}
	st := openStore(t) // no cursor: the search starts at the lowest
	pods := vmidentity.New(rg, st)
	pods.HeldBy(heldNow)
	if uid := identityOf(t, pods, st, "a"); uid != base+3 {
		t.Fatalf("a pod while templates hold %v: uid %d, want %d", held, uid, base+3)
	}
	full := vmidentity.New(vmidentity.Range{Base: base, Count: 2}, openStore(t))
	full.HeldBy(heldNow)
	if err := full.Take(func(*store.VMIdentity) { t.Fatal("hold called without an identity to hold") }); !errors.Is(err, vmidentity.ErrNoneFree) {
		t.Fatalf("a template in a full range: %v, want ErrNoneFree", err)
	}
}

// TestHeldByLater: holders added once the allocator is made (a room's
// VMs of no pod's) count together: no pod and no Take is given a number
// either holds.
func TestHeldByLater(t *testing.T) {
	const base = 810000
	rg := vmidentity.Range{Base: base, Count: 10}
	st := openStore(t)
	a := vmidentity.New(rg, st)
	a.HeldBy(func() []uint32 { return []uint32{base + 1} })
	var held []uint32
	a.HeldBy(func() []uint32 { return held })
	if err := a.Take(func(id *store.VMIdentity) { held = append(held, id.UID) }); err != nil || len(held) != 1 || held[0] != base+2 {
		t.Fatalf("taken %v, %v; want %d", held, err, base+2)
	}
	if uid := identityOf(t, a, st, "a"); uid != base+3 {
		t.Fatalf("a pod while %d and %v are held: uid %d, want %d", base+1, held, uid, base+3)
	}
}

// failing is a store that fails every call.
type failing struct{ put, last, setLast bool }

var errStore = errors.New("store broken")

func (f failing) Sandboxes() ([]*store.Sandbox, error) {
	if f.put || f.last || f.setLast {
		return nil, nil
	}
	return nil, errStore
}

func (f failing) PutSandbox(*store.Sandbox) error {
	if f.put {
		return errStore
	}
	return nil
}

func (f failing) LastIdentity() (uint32, bool, error) {
	if f.last {
		return 0, false, errStore
	}
	return 0, false, nil
}

func (f failing) SetLastIdentity(uint32) error {
	if f.setLast {
		return errStore
	}
	return nil
}

// TestIdentityStoreFailures: a store that cannot be read or written
// gives no identity, and the pod keeps none.
func TestIdentityStoreFailures(t *testing.T) {
	rg := vmidentity.Range{Base: 900000, Count: 10}
	for name, st := range map[string]failing{
		"records unreadable": {}, "record not written": {put: true},
		"cursor unreadable": {last: true}, "cursor not written": {setLast: true},
	} {
		sb := &store.Sandbox{ID: "a"}
		if id, err := vmidentity.New(rg, st).Ensure(sb); !errors.Is(err, errStore) || id != nil || sb.Identity != nil {
			t.Errorf("%s: %+v, %v (pod holds %+v); want the store's error and no identity", name, id, err, sb.Identity)
		}
	}
}

func TestRangeContains(t *testing.T) {
	rg := vmidentity.Range{Base: 1000, Count: 3}
	for id, want := range map[uint32]bool{999: false, 1000: false, 1001: true, 1002: true, 1003: false} {
		if rg.Contains(id) != want {
			t.Errorf("%+v.Contains(%d) = %v", rg, id, !want)
		}
	}
	if (vmidentity.Range{Base: 1000}).Contains(1001) {
		t.Error("an empty range contains a number")
	}
}

// TestGiveTo: a file given to an identity is owned by it, group included;
// no identity leaves it be; a file that is not there is an error naming
// it.
func TestGiveTo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := vmidentity.GiveTo(nil, filepath.Join(t.TempDir(), "none")); err != nil {
		t.Fatalf("no identity: %v", err)
	}
	me := &store.VMIdentity{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	if err := vmidentity.GiveTo(me, p); err != nil {
		t.Fatalf("give to the test's own identity: %v", err)
	}
	if err := vmidentity.GiveTo(me, p+".missing"); err == nil {
		t.Fatal("a missing file given")
	}
}
