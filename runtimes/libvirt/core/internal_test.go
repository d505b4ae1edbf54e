package core

import (
	"strings"
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		why    virt.StopReason
		code   int32
		reason string
	}{
		{virt.StopShutdown, ExitClean, "Completed"},
		{virt.StopCrashed, ExitCrashed, "Crashed"},
		{virt.StopFailed, ExitCrashed, "Crashed"},
		{virt.StopDestroyed, ExitKilled, "Killed"},
		{virt.StopSaved, ExitKilled, "Killed"},
		{virt.StopOther, ExitKilled, "Killed"},
		{virt.StopMigrated, ExitClean, "Migrated"},
	} {
		if code, reason := exitOf(tc.why); code != tc.code || reason != tc.reason {
			t.Errorf("exitOf(%d) = %d %q, want %d %q", tc.why, code, reason, tc.code, tc.reason)
		}
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if len(a) != 32 || a == b {
		t.Fatalf("NewID: %q, %q; want 32 hex digits, different", a, b)
	}
	if !store.ValidID(a) || !store.ValidID(b) {
		t.Fatalf("NewID minted %q, %q, which ValidID refuses", a, b)
	}
	for _, id := range []string{"", "c1", a[:31], a + "0", strings.ToUpper(a), "../../../../etc/passwd00000000000", a[:31] + "g", a[:31] + "/"} {
		if store.ValidID(id) {
			t.Errorf("store.ValidID(%q) = true", id)
		}
	}
}
