package criservice

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/testutil/pkitest"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/migrate"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/vmtypes"
)

// migrationPair is two nodes' VM runtimes on fakes, each with its own
// migration endpoint on 127.0.0.1 (one cluster PKI) and VM identities,
// the source's libvirtd joined to the target's: VMs leave source for
// target. The source's guests answer a guest agent (which goes with
// them). src and tgt are the nodes' migration rooms.
type migrationPair struct {
	source, target *Service
	src, tgt       *migrate.Room
	srcEnv, tgtEnv *coretest.Env
	agent          *guestAgent
}

// newMigrationPair builds the pair; edit may change the target node's
// migration config (the source's uses the defaults).
func newMigrationPair(t *testing.T, edit func(*migration.Config)) *migrationPair {
	t.Helper()
	pki := writeMigrationPKI(t)
	p := &migrationPair{agent: &guestAgent{}}
	p.source, p.srcEnv = newIsolatedService(t, vmidentity.Range{Base: 500000, Count: 100})
	p.target, p.tgtEnv = newIsolatedService(t, vmidentity.Range{Base: 510000, Count: 100})
	p.src, p.tgt = roomOf(p.source), roomOf(p.target)
	p.srcEnv.Libvirt.SetPeer(p.tgtEnv.Libvirt)
	p.srcEnv.Libvirt.SetAgent(p.agent.answer)
	t.Cleanup(func() { p.srcEnv.Libvirt.SetMigrateHook(nil) })
	p.srcEnv.R.Migration = startMigrationNode(t, pki, nil)
	p.tgtEnv.R.Migration = startMigrationNode(t, pki, edit)
	return p
}

// startMigrationNode starts a node's migration endpoint, its sockets in
// a directory of its own, closed at the end of the test.
func startMigrationNode(t *testing.T, pki string, edit func(*migration.Config)) *migration.Node {
	t.Helper()
	dir, err := os.MkdirTemp("", "mig") // short: socket paths have 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := migration.Config{Address: freeAddress(t), LibvirtURI: "qemu+tls://127.0.0.1/system", PKIDir: pki,
		CompletionTimeoutPerGiB: time.Minute, MaxOutgoing: 1, TargetTimeout: 10 * time.Minute, SocketDir: filepath.Join(dir, "s")}
	if edit != nil {
		edit(&cfg)
	}
	n, err := migration.Start(cfg, coretest.Logger())
	if err != nil {
		t.Fatalf("migration.Start: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// freeAddress is 127.0.0.1 and a port free now: the target advertises
// its configured address, so port 0 will not do.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sourceUUID is the source VM's UUID.
const sourceUUID = "0b6e3a4c-1d2e-4f50-8a9b-0c1d2e3f4a5b"

// sourceVM runs a VM pod named name on the source; it returns its
// container ID. crimux defines a domain with no UUID and libvirt gives
// it one, which its XML then has; the fake keeps the XML as crimux wrote
// it, so the test writes the UUID in.
func (p *migrationPair) sourceVM(t *testing.T, name string) string {
	t.Helper()
	_, id := runningVM(t, p.source, name)
	p.setSourceUUID(t, id)
	return id
}

// setSourceUUID writes sourceUUID into the XML of source VM id's domain.
func (p *migrationPair) setSourceUUID(t *testing.T, id string) {
	t.Helper()
	p.srcEnv.Libvirt.Edit(record(t, p.srcEnv, id).Domain, func(d *virtfake.Domain) {
		var x libvirtxml.Domain
		if err := x.Unmarshal(d.XML); err != nil {
			t.Fatal(err)
		}
		x.UUID = sourceUUID
		out, err := x.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		d.XML = out
	})
}

// targetVM makes a VM pod on the target that waits for the VM of from,
// and starts its container; it returns the pod's and container's IDs.
func (p *migrationPair) targetVM(t *testing.T, name, from string) (string, string) {
	t.Helper()
	cfg := podConfig(t, name)
	cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: from}
	sb := runPod(t, p.target, cfg)
	id := createVM(t, p.target, sb, cfg, vmConfig(256, 0, 0))
	startVM(t, p.target, id)
	return sb, id
}

// prepared runs MigrationSource on the source and PrepareMigration on
// the target, as crimuxctl does.
func (p *migrationPair) prepared(t *testing.T, sourceID, targetID string) vmtypes.MigrationTarget {
	t.Helper()
	ctx := context.Background()
	src, err := p.src.MigrationSource(ctx, sourceID)
	if err != nil {
		t.Fatalf("MigrationSource: %v", err)
	}
	tgt, err := p.tgt.PrepareMigration(ctx, targetID, src)
	if err != nil {
		t.Fatalf("PrepareMigration: %v", err)
	}
	return tgt
}

// preparedVM runs a VM pod web on the source, a target pod web-moved
// waiting for it, and prepares the migration; it returns both containers'
// IDs and the prepared target.
func (p *migrationPair) preparedVM(t *testing.T) (string, string, vmtypes.MigrationTarget) {
	t.Helper()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	return srcID, tgtID, p.prepared(t, srcID, tgtID)
}

// migrate moves a VM pod named web from source to target: MigrationSource,
// PrepareMigration, Migrate, FinishMigration, as crimuxctl vm migrate
// does. It returns the source and target container IDs and the result.
func (p *migrationPair) migrate(t *testing.T) (string, string, vmtypes.MigrationResult) {
	t.Helper()
	ctx := context.Background()
	srcID, tgtID, target := p.preparedVM(t)
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	res, err := p.tgt.FinishMigration(ctx, tgtID, "")
	if err != nil {
		t.Fatalf("FinishMigration: %v", err)
	}
	return srcID, tgtID, res
}

// record is container id's record in env e.
func record(t *testing.T, e *coretest.Env, id string) *store.Container {
	t.Helper()
	c := e.Record(t, id)
	if c == nil {
		t.Fatalf("no record of container %s", id)
	}
	return c
}

// containerState is container id's CRI state and exit, through CRI.
func containerState(t *testing.T, s *Service, id string) (runtimeapi.ContainerState, string, string) {
	t.Helper()
	st := status(t, s, id)
	return st.State, st.Reason, st.Message
}

// writeMigrationPKI writes a node's pkipath for one test: both nodes of
// a pair share it (one cluster CA).
func writeMigrationPKI(t *testing.T) string { return pkitest.NodeDir(t) }
