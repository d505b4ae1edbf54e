package registry

import (
	"context"
	"testing"

	"github.com/crimux/crimux/config"
)

// TestRebuildKeepsBackends: a reload that adds a runtime keeps the
// backends of unchanged runtimes (nothing reconnects, the VM store is not
// reopened) and makes only the new one.
func TestRebuildKeepsBackends(t *testing.T) {
	old, cf, vf := newTwo(t)
	factories := map[string]Factory{config.TypeContainer: cf, config.TypeVM: vf}
	runc2 := config.Runtime{Name: "runc2", Type: config.TypeContainer, Handlers: []string{"runc2"}, Endpoint: "unix:///other.sock"}
	r, closeOld, err := Rebuild(context.Background(), cfgOf(containerdRT, vmRT, runc2), factories, old)
	if err != nil {
		t.Fatal(err)
	}
	closeOld()
	if len(cf.made) != 2 || len(vf.made) != 1 {
		t.Fatalf("made %d container and %d vm backends, want 2 and 1 (only runc2 new)", len(cf.made), len(vf.made))
	}
	if r.Primary().Backend != old.Primary().Backend {
		t.Fatal("the primary's backend was not taken over")
	}
	for _, b := range append(cf.made, vf.made...) {
		if b.closeCount() != 0 {
			t.Fatalf("backend %s closed by a reload that keeps it", b.key)
		}
	}
	if rt, err := r.ForHandler("runc2"); err != nil || rt.Name != "runc2" {
		t.Fatalf("runc2 not routable after reload: %v", err)
	}
}

// TestRebuildClosesDropped: a runtime removed by a reload is closed by
// closeOld, and only then.
func TestRebuildClosesDropped(t *testing.T) {
	old, cf, vf := newTwo(t)
	factories := map[string]Factory{config.TypeContainer: cf, config.TypeVM: vf}
	r, closeOld, err := Rebuild(context.Background(), cfgOf(containerdRT), factories, old)
	if err != nil {
		t.Fatal(err)
	}
	if vf.made[0].closeCount() != 0 {
		t.Fatal("dropped backend closed before closeOld")
	}
	closeOld()
	if vf.made[0].closeCount() != 1 || cf.made[0].closeCount() != 0 {
		t.Fatalf("close counts: vm %d (want 1), containerd %d (want 0)", vf.made[0].closeCount(), cf.made[0].closeCount())
	}
	if _, err := r.ForHandler("vm"); err == nil {
		t.Fatal("handler vm still routed after its runtime was removed")
	}
}

// TestRebuildFailureKeepsOld: a failing reload closes what it made and
// leaves the old registry's backends alone.
func TestRebuildFailureKeepsOld(t *testing.T) {
	old, cf, vf := newTwo(t)
	cf.failFor = "runc2"
	runc2 := config.Runtime{Name: "runc2", Type: config.TypeContainer, Handlers: []string{"runc2"}, Endpoint: "unix:///other.sock"}
	_, _, err := Rebuild(context.Background(), cfgOf(containerdRT, vmRT, runc2),
		map[string]Factory{config.TypeContainer: cf, config.TypeVM: vf}, old)
	if err == nil {
		t.Fatal("Rebuild succeeded with a failing factory")
	}
	for _, b := range append(cf.made, vf.made...) {
		if b.closeCount() != 0 {
			t.Fatalf("old backend %s closed by a failed reload", b.key)
		}
	}
}
