package criservice

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A durable VM (its root disk on a volume, crimux.io/root-disk) migrates
// with its volume shared: both nodes reach it, nothing is copied.

// sharedVolume is a filesystem volume both nodes of a pair reach, holding
// a qcow2 disk (disk.qcow2) when withDisk.
func sharedVolume(t *testing.T, withDisk bool) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a root volume's file is bind-mounted)")
	}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed")
	}
	dir := t.TempDir()
	if withDisk {
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(dir, "disk.qcow2"), "16M").CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create: %v: %s", err, out)
		}
	}
	return dir
}

// durableConfig is the test VM on the volume in dir, at /var/lib/vm.
func durableConfig(dir string) *runtimeapi.ContainerConfig {
	cfg := vmConfig(256, 0, 0)
	cfg.Annotations = map[string]string{vm.AnnotationRootDisk: "/var/lib/vm"}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/var/lib/vm", HostPath: dir}}
	return cfg
}

// durablePair is a pair with a durable VM running on the source, on the
// volume in dir, and a target pod waiting for it on the same volume.
func durablePair(t *testing.T, dir string) (p *migrationPair, srcID, tgtID string) {
	t.Helper()
	p = newMigrationPair(t, nil)
	cfg := podConfig(t, "web")
	sb := runPod(t, p.source, cfg)
	srcID = createVM(t, p.source, sb, cfg, durableConfig(dir))
	startVM(t, p.source, srcID)
	p.setSourceUUID(t, srcID)
	tcfg := podConfig(t, "web-moved")
	tcfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: "ns/web"}
	tsb := runPod(t, p.target, tcfg)
	tgtID = createVM(t, p.target, tsb, tcfg, durableConfig(dir))
	startVM(t, p.target, tgtID)
	for _, d := range []string{record(t, p.srcEnv, srcID).Dir, record(t, p.tgtEnv, tgtID).Dir} {
		t.Cleanup(func() { _ = rootvol.Release(d) }) // the bind mounts, before the dirs go
	}
	return p, srcID, tgtID
}

// checkOwners: the volume's disk file stays root's; each VM's attachment
// of it reads as that VM's identity (srcLo, tgtLo: the first uid of each
// node's range), the two nodes sharing one inode without giving it to
// either.
func checkOwners(t *testing.T, p *migrationPair, dir, srcID, tgtID string) {
	t.Helper()
	if uid, _, _ := ownerOf(t, filepath.Join(dir, "disk.qcow2")); uid != 0 {
		t.Errorf("the volume's disk is uid %d's, want root's", uid)
	}
	for _, a := range []struct {
		env *coretest.Env
		id  string
		lo  uint32
	}{{p.srcEnv, srcID, 500000}, {p.tgtEnv, tgtID, 510000}} {
		if uid, _, _ := ownerOf(t, filepath.Join(record(t, a.env, a.id).Dir, "root-volume")); uid < a.lo || uid >= a.lo+100 {
			t.Errorf("%s's attachment reads as uid %d's, want its VM identity's (%d...)", a.id, uid, a.lo)
		}
	}
}

// TestMigrateDurableVM: the target pod arrives on the source's volume:
// the disk is examined, not imported; the migration copies no disk
// (libvirt is given none, so it copies none), the arriving domain's root
// disk is the target's attachment of the volume, and the VM runs there
// as the target pod's, on its identity.
func TestMigrateDurableVM(t *testing.T) {
	dir := sharedVolume(t, true)
	p, srcID, tgtID := durablePair(t, dir)
	tgtRec := record(t, p.tgtEnv, tgtID)
	if tgtRec.RootVolume == nil {
		t.Fatal("the target's record names no root volume")
	}
	target := p.prepared(t, srcID, tgtID)
	if len(target.Disks) != 0 {
		t.Errorf("the migration copies %q: a root volume is shared", target.Disks)
	}
	attach := filepath.Join(tgtRec.Dir, "root-volume")
	if !strings.Contains(target.DomainXML, `file="`+attach+`"`) {
		t.Errorf("the arriving domain's root disk is not the target's attachment %s:\n%s", attach, target.DomainXML)
	}
	var sent virt.Migration
	p.srcEnv.Libvirt.SetMigrateHook(func(m virt.Migration) error { sent = m; return nil })
	if err := p.src.Migrate(context.Background(), srcID, target, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if len(sent.Disks) != 0 {
		t.Errorf("libvirt was asked to copy %q", sent.Disks)
	}
	if _, err := p.tgt.FinishMigration(context.Background(), tgtID, ""); err != nil {
		t.Fatalf("FinishMigration: %v", err)
	}
	if st, reason, _ := containerState(t, p.source, srcID); st != exited || reason != core.ReasonMigrated {
		t.Errorf("the source container: %s %s, want exited Migrated", st, reason)
	}
	if d, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); !ok || d.State != virt.StateRunning {
		t.Fatalf("the arrived domain: %v, want running", d.State)
	}
	checkOwners(t, p, dir, srcID, tgtID)
}

// TestMigrateDurableVMFails: a failed migration leaves the VM on its
// source, which reaches its volume's disk as before; the disk is never
// given to either side's identity.
func TestMigrateDurableVMFails(t *testing.T) {
	dir := sharedVolume(t, true)
	p, srcID, tgtID := durablePair(t, dir)
	checkOwners(t, p, dir, srcID, tgtID)
	target := p.prepared(t, srcID, tgtID)
	p.srcEnv.Libvirt.Fail("Migrate", errBoom)
	if err := p.src.Migrate(context.Background(), srcID, target, nil); !errors.Is(err, errBoom) {
		t.Fatalf("Migrate: %v, want libvirt's error", err)
	}
	if st, _, _ := containerState(t, p.source, srcID); st != running {
		t.Errorf("the source container is %s, want running", st)
	}
	checkOwners(t, p, dir, srcID, tgtID)
}

// TestMigrationTargetOnAnEmptyVolume: a target pod whose volume holds no
// disk (not the source's storage) is refused at CreateContainer, naming
// the volume; nothing is imported into it.
func TestMigrationTargetOnAnEmptyVolume(t *testing.T) {
	dir := sharedVolume(t, false)
	p := newMigrationPair(t, nil)
	cfg := podConfig(t, "web-moved")
	cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: "ns/web"}
	sb := runPod(t, p.target, cfg)
	_, err := p.target.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: durableConfig(dir), SandboxConfig: cfg})
	wantCode(t, "a target on an empty volume", err, codes.FailedPrecondition, "/var/lib/vm")
	if !strings.Contains(err.Error(), "holds no disk") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the volume was written: %v", entries)
	}
}
