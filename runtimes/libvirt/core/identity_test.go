package core_test

import (
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// restarted is the runtime of a crimux started again on e's store: no
// memory of the identities handed out but what the store keeps.
func restarted(e *coretest.Env) *core.Runtime {
	return core.New(e.R.Opts, core.Parts{Store: e.R.Store, Conn: e.Libvirt, Images: e.Images, Cgroups: e.Cgroups,
		CIData: e.CIData, Log: coretest.Logger()})
}

func identityOf(t *testing.T, r *core.Runtime, e *coretest.Env, pod string) uint32 {
	t.Helper()
	sb := e.PutPod(t, pod, nil)
	id, err := r.EnsureIdentity(sb)
	if err != nil || id == nil {
		t.Fatalf("pod %s: identity %v, %v", pod, id, err)
	}
	return id.UID
}

func removePod(t *testing.T, e *coretest.Env, pod string) {
	t.Helper()
	if err := e.R.Store.DeleteSandbox(pod); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityAfterRestartIsNotTheOneFreed: the identity a crimux
// started again hands out comes after the last one handed out, not the
// lowest free: a number just freed (its pod's files perhaps still on a
// volume somewhere) is the last to be given again.
func TestIdentityAfterRestartIsNotTheOneFreed(t *testing.T) {
	const base = 500000
	e := coretest.New(t, coretest.Options{Identities: core.IdentityRange{Base: base, Count: 10}})
	for i, pod := range []string{"a", "b", "c"} {
		if uid := identityOf(t, e.R, e, pod); uid != base+1+uint32(i) {
			t.Fatalf("pod %s: uid %d, want %d", pod, uid, base+1+i)
		}
	}
	removePod(t, e, "c") // the one most recently freed
	r := restarted(e)
	if uid := identityOf(t, r, e, "d"); uid != base+4 {
		t.Fatalf("after a restart, the next pod got uid %d, want %d (after the last given; %d was just freed)", uid, base+4, base+3)
	}
	// And the one freed before the restart is not given at the next one
	// either.
	removePod(t, e, "b")
	r = restarted(e)
	if uid := identityOf(t, r, e, "e"); uid != base+5 {
		t.Fatalf("after a second restart, the next pod got uid %d, want %d", uid, base+5)
	}
}

// TestIdentityAfterRestartWraps: the search goes on after the last
// number given, wrapping round the range: the first free number after
// it, which a restart does not change.
func TestIdentityAfterRestartWraps(t *testing.T) {
	const base = 600000
	e := coretest.New(t, coretest.Options{Identities: core.IdentityRange{Base: base, Count: 5}}) // 600001..600004
	for _, pod := range []string{"a", "b", "c", "d"} {
		identityOf(t, e.R, e, pod)
	}
	removePod(t, e, "a") // 600001
	removePod(t, e, "c") // 600003, freed last
	r := restarted(e)
	if uid := identityOf(t, r, e, "e"); uid != base+1 {
		t.Fatalf("after a restart, the next pod got uid %d, want %d (wrapped past %d)", uid, base+1, base+4)
	}
	r = restarted(e)
	if uid := identityOf(t, r, e, "f"); uid != base+3 {
		t.Fatalf("the next pod got uid %d, want %d", uid, base+3)
	}
}

// TestIdentityCursorOfAnOlderStore: a store that keeps no cursor (made
// by an older crimux, or rebuilt from the record copies) goes on after
// the highest identity its records hold, not from the lowest free.
func TestIdentityCursorOfAnOlderStore(t *testing.T) {
	const base = 700000
	e := coretest.New(t, coretest.Options{Identities: core.IdentityRange{Base: base, Count: 10}})
	for i, pod := range []string{"a", "b", "c"} {
		e.PutPod(t, pod, func(sb *store.Sandbox) {
			sb.Identity = &store.VMIdentity{UID: base + 1 + uint32(i), GID: base + 1 + uint32(i)}
		})
	}
	removePod(t, e, "a")
	if uid := identityOf(t, e.R, e, "d"); uid != base+4 {
		t.Fatalf("the next pod got uid %d, want %d (after the highest recorded)", uid, base+4)
	}
}
