package criservice

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/testutil/pkitest"
	"github.com/crimux/crimux/runtimes/libvirt/migrate"
	"github.com/crimux/crimux/vmtypes"
)

// reseal seals src again as the source node would for container srcID's
// pod: a genuine description that differs.
func (p *migrationPair) reseal(t *testing.T, srcID string, src *vmtypes.MigrationSource) {
	t.Helper()
	sb, err := p.srcEnv.R.Store.Sandbox(record(t, p.srcEnv, srcID).SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	ns := sb.Config.GetMetadata().GetNamespace()
	if src.Seal, err = p.srcEnv.R.Migration.Seal(migrate.SealSource, migrate.SourcePayload(ns, *src)); err != nil {
		t.Fatal(err)
	}
}

// withHostDevice is x with a host PCI device and a host directory added:
// what a forged description would hand a guest.
func withHostDevice(t *testing.T, x string) string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	d.Devices.Hostdevs = append(d.Devices.Hostdevs, libvirtxml.DomainHostdev{SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
		Source: &libvirtxml.DomainHostdevSubsysPCISource{Address: &libvirtxml.DomainAddressPCI{Domain: new(uint), Bus: new(uint), Slot: new(uint), Function: new(uint)}}}})
	d.Devices.Filesystems = append(d.Devices.Filesystems, libvirtxml.DomainFilesystem{
		Source: &libvirtxml.DomainFilesystemSource{Mount: &libvirtxml.DomainFilesystemSourceMount{Dir: "/"}},
		Target: &libvirtxml.DomainFilesystemTarget{Dir: "host"}})
	out, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrepareRefusesAForgedSource: a source description that no node
// sealed, or sealed and then altered, or sealed for another namespace's
// pod, or by a node of another cluster, is refused naming source.seal,
// before anything of the target changes: its own domain is still
// defined and it still waits. The genuine description is then prepared.
func TestPrepareRefusesAForgedSource(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	src, err := p.src.MigrationSource(ctx, srcID)
	if err != nil {
		t.Fatal(err)
	}
	stranger := startMigrationNode(t, pkitest.NodeDir(t), nil)
	for name, forge := range map[string]func(vmtypes.MigrationSource) vmtypes.MigrationSource{
		"unsealed": func(s vmtypes.MigrationSource) vmtypes.MigrationSource { s.Seal = vmtypes.Seal{}; return s },
		"a host device added": func(s vmtypes.MigrationSource) vmtypes.MigrationSource {
			s.DomainXML = withHostDevice(t, s.DomainXML)
			return s
		},
		"another guest MAC": func(s vmtypes.MigrationSource) vmtypes.MigrationSource { s.GuestMAC = "52:54:00:ff:ff:ff"; return s },
		"sealed for another namespace": func(s vmtypes.MigrationSource) vmtypes.MigrationSource {
			s.Seal, err = p.srcEnv.R.Migration.Seal(migrate.SealSource, migrate.SourcePayload("other", s))
			return s
		},
		"sealed by another cluster's node": func(s vmtypes.MigrationSource) vmtypes.MigrationSource {
			s.Seal, err = stranger.Seal(migrate.SealSource, migrate.SourcePayload("ns", s))
			return s
		},
	} {
		forged := forge(src)
		if err != nil {
			t.Fatal(err)
		}
		_, perr := p.tgt.PrepareMigration(ctx, tgtID, forged)
		wantCode(t, "PrepareMigration of a source "+name, perr, codes.InvalidArgument, "source.seal")
	}
	c := record(t, p.tgtEnv, tgtID)
	if _, ok := p.tgtEnv.Libvirt.Domain(c.Domain); !ok || !c.AwaitsMigration() || c.Migration.Token != "" {
		t.Fatalf("after refusals the target: own domain defined %v, waits %v, token %q; want defined, waiting, none", ok, c.AwaitsMigration(), c.Migration.Token)
	}
	if _, err := p.tgt.PrepareMigration(ctx, tgtID, src); err != nil {
		t.Fatalf("PrepareMigration of the genuine source after the refusals: %v", err)
	}
}

// TestMigrateRefusesAForgedTarget: a target's answer altered after the
// target sealed it (another domain, another endpoint), or sealed for
// another namespace's pod, is refused naming target.seal: libvirt is
// never asked, and the VM runs on the source. The genuine answer then
// moves it.
func TestMigrateRefusesAForgedTarget(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID, _, target := p.preparedVM(t)
	if len(target.Seal.Signature) == 0 {
		t.Fatal("PrepareMigration's answer is not sealed")
	}
	var err error
	for name, forge := range map[string]func(vmtypes.MigrationTarget) vmtypes.MigrationTarget{
		"unsealed": func(g vmtypes.MigrationTarget) vmtypes.MigrationTarget { g.Seal = vmtypes.Seal{}; return g },
		"a host device added": func(g vmtypes.MigrationTarget) vmtypes.MigrationTarget {
			g.DomainXML = withHostDevice(t, g.DomainXML)
			return g
		},
		"another emulator": func(g vmtypes.MigrationTarget) vmtypes.MigrationTarget {
			g.DomainXML = strings.Replace(g.DomainXML, "<emulator>", "<emulator>/tmp/evil", 1)
			return g
		},
		"another endpoint": func(g vmtypes.MigrationTarget) vmtypes.MigrationTarget { g.Address = "127.0.0.1:1"; return g },
		"sealed for another namespace": func(g vmtypes.MigrationTarget) vmtypes.MigrationTarget {
			g.Seal, err = p.tgtEnv.R.Migration.Seal(migrate.SealTarget, migrate.TargetPayload("other", g))
			return g
		},
	} {
		forged := forge(target)
		if err != nil {
			t.Fatal(err)
		}
		merr := p.src.Migrate(ctx, srcID, forged, nil)
		wantCode(t, "Migrate to a target "+name, merr, codes.InvalidArgument, "target.seal")
	}
	if n := len(p.srcEnv.Libvirt.Migrations()); n != 0 {
		t.Fatalf("libvirt was asked to migrate %d times", n)
	}
	if c := record(t, p.srcEnv, srcID); c.State != running || c.Migration != nil {
		t.Fatalf("the source container: %s, migration %+v; want running, none", c.State, c.Migration)
	}
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatalf("Migrate to the genuine target after the refusals: %v", err)
	}
}
