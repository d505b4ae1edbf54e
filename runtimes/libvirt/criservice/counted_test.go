package criservice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
)

// TestTemplateClonesCounted: the runtime's Counters hear how each VM
// that asked for its template started: booted when it had none ready or
// its restore failed, restored otherwise; a VM that did not ask is not
// counted.
func TestTemplateClonesCounted(t *testing.T) {
	e, s, _ := instantService(t)
	clones := func(restored, booted int) {
		t.Helper()
		if r, b := e.Counters.Events("template_clone restored"), e.Counters.Events("template_clone booted"); r != restored || b != booted {
			t.Fatalf("clones counted: %d restored, %d booted; want %d, %d", r, b, restored, booted)
		}
	}
	sb, cfg := instantPod(t, s, "first", instant.Handler, nil)
	startVM(t, s, createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000)))
	clones(0, 1) // its template is being made
	testutil.Eventually(t, 10*time.Second, "the template made", func() error {
		if all, err := makerOf(s).Store.List(); err != nil || len(all) != 1 || all[0].State != template.Ready {
			return fmt.Errorf("templates %+v, %v", all, err)
		}
		return nil
	})
	if n := e.Counters.Events("template_making " + vmcounters.MakingReady); n != 1 {
		t.Errorf("%d makings counted ready, want 1", n)
	}
	sb, cfg = instantPod(t, s, "second", instant.Handler, nil)
	startVM(t, s, createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000)))
	clones(1, 1)
	sb, cfg = instantPod(t, s, "third", instant.Handler, nil)
	id := createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000))
	if c, _ := e.R.Store.Container(id); c.Clone == nil {
		t.Fatal("the third pod's VM is no clone")
	}
	clones(1, 1) // not counted until it starts
	e.Libvirt.Fail("RestoreState", errBoom)
	startVM(t, s, id)
	clones(1, 2) // its restore failed: it booted
	sb, cfg = instantPod(t, s, "plain", "vm", nil)
	startVM(t, s, createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000)))
	clones(1, 2)
}

// TestMigrationsTimed: each node times its part of a migration, by role
// and result, and the target records the switch-over's downtime; a
// target that was never prepared is not timed.
func TestMigrationsTimed(t *testing.T) {
	p := newMigrationPair(t, nil)
	p.migrate(t)
	timed := func(what string, n int, e interface{ Timed(string) []time.Duration }) {
		t.Helper()
		if got := e.Timed(what); len(got) != n {
			t.Errorf("%s: %d timed (%v), want %d", what, len(got), got, n)
		}
	}
	timed("migration outgoing succeeded", 1, p.srcEnv.Counters)
	timed("migration incoming succeeded", 1, p.tgtEnv.Counters)
	timed("downtime", 1, p.tgtEnv.Counters)
	timed("downtime", 0, p.srcEnv.Counters)

	ctx := context.Background()
	srcID := p.sourceVM(t, "db")
	_, tgtID := p.targetVM(t, "db-moved", "ns/db")
	target := p.prepared(t, srcID, tgtID)
	p.srcEnv.Libvirt.Fail("Migrate", errBoom)
	if err := p.src.Migrate(ctx, srcID, target, nil); err == nil {
		t.Fatal("Migrate succeeded with libvirt failing")
	}
	if _, err := p.tgt.FinishMigration(ctx, tgtID, "boom"); err != nil {
		t.Fatal(err)
	}
	timed("migration outgoing failed", 1, p.srcEnv.Counters)
	timed("migration incoming failed", 1, p.tgtEnv.Counters)
	timed("downtime", 1, p.tgtEnv.Counters)

	q := newMigrationPair(t, func(c *migration.Config) { c.TargetTimeout = 100 * time.Millisecond })
	_, waiting := q.targetVM(t, "web-moved", "ns/web")
	waitFor(t, "the target to give up", func() bool { return record(t, q.tgtEnv, waiting).State == exited })
	if n := q.tgtEnv.Counters.Migrations(core.MigrationIncoming, core.MigrationFailed); n != 1 {
		t.Errorf("the unprepared target counted %d failed, want 1", n)
	}
	timed("migration incoming failed", 0, q.tgtEnv.Counters)
}
