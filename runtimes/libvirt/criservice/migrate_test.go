package criservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/vmtypes"
)

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
)

// TestMigrationTargetWaits: a VM pod made with crimux.io/migrate-from is
// started with no qemu: its container runs, its domain is defined but
// never started, and its log says what it waits for and how long.
func TestMigrationTargetWaits(t *testing.T) {
	p := newMigrationPair(t, nil)
	_, id := p.targetVM(t, "web-moved", "ns/web")
	if st, _, _ := containerState(t, p.target, id); st != running {
		t.Fatalf("the waiting target is %s, want CONTAINER_RUNNING", st)
	}
	c := record(t, p.tgtEnv, id)
	if m := c.Migration; m == nil || !m.Incoming || m.From != "ns/web" || m.Token != "" ||
		time.Until(time.Unix(0, m.Deadline)) < 9*time.Minute {
		t.Fatalf("its migration record %+v: want incoming from ns/web, unprepared, 10 min to wait", m)
	}
	if st := domainState(t, p.tgtEnv, c.Domain); st != virt.StateShutoff {
		t.Errorf("its domain is %s, want defined and shut off", st)
	}
	if n := p.tgtEnv.Libvirt.Calls("Start"); n != 0 {
		t.Errorf("libvirt was asked to start a domain %d times", n)
	}
	if log := readLog(t, podConfigOf(t, p.target, id)); !strings.Contains(log, "waiting for this VM to arrive from ns/web") {
		t.Errorf("its log does not say it waits:\n%s", log)
	}
}

// TestPrepareMigration: the target's own domain makes way for the
// arriving one (libvirt defines it under the same name), kept as
// incoming.xml; the target's node expects the VM's streams under a new
// token; the source learns where to send it, as what, and which disk
// to copy.
func TestPrepareMigration(t *testing.T) {
	p := newMigrationPair(t, nil)
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	tgtRec := record(t, p.tgtEnv, tgtID)
	own, _ := p.tgtEnv.Libvirt.Domain(tgtRec.Domain)

	target := p.prepared(t, srcID, tgtID)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(target.Token) || target.Address != p.tgtEnv.R.Migration.Address() ||
		target.LibvirtURI != "qemu+tls://127.0.0.1/system" || target.DomainName != tgtRec.Domain || !slices.Equal(target.Disks, []string{"vda"}) {
		t.Errorf("prepared target %+v", target)
	}
	if !strings.Contains(target.DomainXML, "<uuid>"+sourceUUID+"</uuid>") {
		t.Errorf("the prepared domain is not the source's machine:\n%s", target.DomainXML)
	}
	if _, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); ok {
		t.Error("the target's own domain is still defined: the arriving one cannot be")
	}
	if kept, err := os.ReadFile(filepath.Join(tgtRec.Dir, "incoming.xml")); err != nil || string(kept) != own.XML {
		t.Errorf("incoming.xml (%v) is not the target's own domain:\n%s", err, kept)
	}
	if !p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Error("the target's node does not expect the VM")
	}
	if c := record(t, p.tgtEnv, tgtID); c.State != running || c.Migration.Token != target.Token || c.Migration.SourceMAC != "52:54:00:00:00:01" {
		t.Errorf("the target's record: %s, %+v; want running, the token and the source's MAC", c.State, c.Migration)
	}
}

// TestMigrateMovesTheVM: after Migrate and FinishMigration the VM runs
// on the target under the target's domain name, as the target pod's
// (its identity, disk and console), with the target pod's address given
// through its guest agent; the target container runs, its migration
// over and nothing of it left.
func TestMigrateMovesTheVM(t *testing.T) {
	p := newMigrationPair(t, nil)
	srcID, tgtID, res := p.migrate(t)
	tgtRec := record(t, p.tgtEnv, tgtID)
	if st, _, _ := containerState(t, p.target, tgtID); st != running || tgtRec.Migration != nil {
		t.Errorf("the target container: %s, migration %+v; want running, none", st, tgtRec.Migration)
	}
	d, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain)
	if !ok || d.State != virt.StateRunning {
		t.Fatalf("the arrived domain %s: %s (defined %v), want running", tgtRec.Domain, d.State, ok)
	}
	srcDom, _ := p.srcEnv.Libvirt.Domain(record(t, p.srcEnv, srcID).Domain)
	wantArrivedXML(t, d.XML, srcDom.XML, p.target, tgtRec)
	if _, err := os.Stat(filepath.Join(tgtRec.Dir, "incoming.xml")); !os.IsNotExist(err) {
		t.Errorf("incoming.xml is left: %v", err)
	}
	if p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Error("the target's node still expects the VM")
	}
	if !slices.Equal(res.Addresses, []string{"10.1.0.5"}) || res.Note != "" {
		t.Errorf("result %+v: want the target pod's address and no note", res)
	}
	if script := p.agent.last(); !strings.Contains(script, "ip addr add 10.1.0.5/24") || !strings.Contains(script, "= 52:54:00:00:00:01 ]") {
		t.Errorf("the guest was not given its new pod's address:\n%s", script)
	}
}

// TestMigrateExitsTheSource: once its VM left, the source container has
// exited Migrated (naming the target), its domain is shut off, and its
// pod, whose disk is the VM's past, makes no VM again.
func TestMigrateExitsTheSource(t *testing.T) {
	p := newMigrationPair(t, nil)
	srcID, _, _ := p.migrate(t)
	srcRec := record(t, p.srcEnv, srcID)
	if st, reason, msg := containerState(t, p.source, srcID); st != exited || reason != core.ReasonMigrated || !strings.Contains(msg, p.tgtEnv.R.Migration.Address()) {
		t.Errorf("the source container: %s, %q, %q; want exited Migrated, naming the target", st, reason, msg)
	}
	if srcRec.Migration != nil {
		t.Errorf("the source container's migration is still recorded: %+v", srcRec.Migration)
	}
	if st := domainState(t, p.srcEnv, srcRec.Domain); st != virt.StateShutoff {
		t.Errorf("the source domain is %s, want shut off", st)
	}
	_, err := p.source.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: srcRec.SandboxID,
		Config: vmConfig(256, 0, 0), SandboxConfig: podConfig(t, "web")})
	wantCode(t, "CreateContainer in the pod whose VM moved", err, codes.FailedPrecondition, "moved to another node")
}

// wantArrivedXML: the arrived domain is the source's machine (its UUID)
// as the target pod's: its qemu identity, root disk, cloud-init volume
// and console.
func wantArrivedXML(t *testing.T, x, srcXML string, tgtSvc *Service, tgt *store.Container) {
	t.Helper()
	var d, src libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if err := src.Unmarshal(srcXML); err != nil {
		t.Fatal(err)
	}
	sb, err := tgtSvc.Store.Sandbox(tgt.SandboxID)
	if err != nil || sb.Identity == nil || sb.Disk == nil {
		t.Fatalf("the target pod's record: %+v, %v", sb, err)
	}
	if d.UUID != src.UUID {
		t.Errorf("the arrived domain's UUID %s, want the source's %s", d.UUID, src.UUID)
	}
	label := fmt.Sprintf("+%d:+%d", sb.Identity.UID, sb.Identity.GID)
	if len(d.SecLabel) != 1 || d.SecLabel[0].Label != label {
		t.Errorf("the arrived domain runs as %+v, want the target pod's %s", d.SecLabel, label)
	}
	var disks []string
	for _, disk := range d.Devices.Disks {
		disks = append(disks, disk.Target.Dev+" "+disk.Source.File.File)
	}
	if want := []string{"vda " + sb.Disk.Path, "hdc " + filepath.Join(tgt.Dir, cidata.File)}; !slices.Equal(disks, want) {
		t.Errorf("the arrived domain's disks %q, want the target pod's %q", disks, want)
	}
	if s := d.Devices.Serials; len(s) != 1 || s[0].Source.UNIX.Path != vmfiles.ConsoleSocket(tgt.Dir) {
		t.Errorf("the arrived domain's console %+v, want on %s", s, vmfiles.ConsoleSocket(tgt.Dir))
	}
}

// podConfigOf is the config of container id's pod.
func podConfigOf(t *testing.T, s *Service, id string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	c, err := s.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.Store.Sandbox(c.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	return sb.Config
}

// TestMigrateFails: a migration libvirt fails leaves the VM running on
// its source, its container running with no migration recorded; the
// target, told why, exits MigrationFailed with that message, its own
// domain defined again (never started) for RemoveContainer, its node
// expecting nothing.
func TestMigrateFails(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	srcRec := record(t, p.srcEnv, srcID)
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	tgtRec := record(t, p.tgtEnv, tgtID)
	target := p.prepared(t, srcID, tgtID)

	p.srcEnv.Libvirt.Fail("Migrate", errBoom)
	if err := p.src.Migrate(ctx, srcID, target, nil); !errors.Is(err, errBoom) {
		t.Fatalf("Migrate: %v, want libvirt's error", err)
	}
	if st, _, _ := containerState(t, p.source, srcID); st != running {
		t.Errorf("the source container is %s, want still running", st)
	}
	if m := record(t, p.srcEnv, srcID).Migration; m != nil {
		t.Errorf("the source container's migration is still recorded: %+v", m)
	}
	if st := domainState(t, p.srcEnv, srcRec.Domain); st != virt.StateRunning {
		t.Errorf("the source domain is %s, want running", st)
	}

	if _, err := p.tgt.FinishMigration(ctx, tgtID, "why"); err != nil {
		t.Fatalf("FinishMigration(failed): %v", err)
	}
	st := status(t, p.target, tgtID)
	if st.State != exited || st.Reason != core.ReasonMigrationFailed || st.Message != "why" || st.ExitCode != core.ExitMigrationFailed {
		t.Errorf("the target container: %s, exit %d, %q, %q; want exited %d MigrationFailed \"why\"", st.State, st.ExitCode, st.Reason, st.Message, core.ExitMigrationFailed)
	}
	if d, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); ok && d.State.Active() {
		t.Errorf("the target's domain runs (%s) after the failure", d.State)
	}
	if _, err := p.target.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: tgtID}); err != nil {
		t.Fatalf("RemoveContainer of the failed target: %v", err)
	}
	if _, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); ok {
		t.Error("the failed target's domain is left after RemoveContainer")
	}
	if p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Error("the target's node still expects the VM")
	}
	if _, err := os.Stat(p.tgtEnv.R.Migration.Dir(target.Token)); !os.IsNotExist(err) {
		t.Errorf("the target's socket dir is left: %v", err)
	}
}

// TestMigrationTargetTimesOut: a target whose VM does not arrive
// within TargetTimeout exits MigrationFailed on its own, saying so; its
// own domain, never started, stays for RemoveContainer.
func TestMigrationTargetTimesOut(t *testing.T) {
	p := newMigrationPair(t, func(c *migration.Config) { c.TargetTimeout = 300 * time.Millisecond })
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	tgtRec := record(t, p.tgtEnv, tgtID)
	if left := time.Until(time.Unix(0, tgtRec.Migration.Deadline)); left > 300*time.Millisecond {
		t.Errorf("the target's deadline is %s away, want at most its 300ms", left)
	}
	waitFor(t, "the target to give up", func() bool { return record(t, p.tgtEnv, tgtID).State == exited })
	if _, reason, msg := containerState(t, p.target, tgtID); reason != core.ReasonMigrationFailed || !strings.Contains(msg, "within the target timeout") {
		t.Errorf("the target container: %q, %q; want MigrationFailed saying it timed out", reason, msg)
	}
	if d, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); !ok || d.State != virt.StateShutoff {
		t.Errorf("the target's own domain: defined %v, %s; want defined, shut off", ok, d.State)
	}
}

// TestMigrateRefusesAnIncompleteTarget: a target that names no
// libvirtd, endpoint, token or domain is InvalidArgument naming the
// field, and the VM is left as it was.
func TestMigrateRefusesAnIncompleteTarget(t *testing.T) {
	p := newMigrationPair(t, nil)
	srcID := p.sourceVM(t, "web")
	full := vmtypes.MigrationTarget{LibvirtURI: "qemu+tls://127.0.0.1/system", Address: p.tgtEnv.R.Migration.Address(),
		Token: strings.Repeat("ab", 16), DomainXML: "<domain/>", DomainName: "crimux-vm--x", Disks: []string{"vda"}}
	for field, edit := range map[string]func(*vmtypes.MigrationTarget){
		"target.libvirt_uri": func(t *vmtypes.MigrationTarget) { t.LibvirtURI = "" },
		"target.address":     func(t *vmtypes.MigrationTarget) { t.Address = "" },
		"target.token":       func(t *vmtypes.MigrationTarget) { t.Token = "" },
		"target.domain_xml":  func(t *vmtypes.MigrationTarget) { t.DomainXML = "" },
	} {
		target := full
		edit(&target)
		err := p.src.Migrate(context.Background(), srcID, target, nil)
		wantCode(t, "Migrate without "+field, err, codes.InvalidArgument, field)
	}
	if n := len(p.srcEnv.Libvirt.Migrations()); n != 0 {
		t.Errorf("libvirt was asked to migrate %d times", n)
	}
	if c := record(t, p.srcEnv, srcID); c.State != running || c.Migration != nil {
		t.Errorf("the source container: %s, migration %+v; want running, none", c.State, c.Migration)
	}
}

// TestMigrationRefusesWhatIsNotWaiting: PrepareMigration and
// FinishMigration of a container that is no waiting target (a running
// VM, a target that has exited), and MigrationSource of a container
// that is no running VM (a waiting target), are FailedPrecondition.
func TestMigrationRefusesWhatIsNotWaiting(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	src, err := p.src.MigrationSource(ctx, srcID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.src.PrepareMigration(ctx, srcID, src)
	wantCode(t, "PrepareMigration of a running VM", err, codes.FailedPrecondition, "is not waiting for a migrating VM")
	_, err = p.src.FinishMigration(ctx, srcID, "")
	wantCode(t, "FinishMigration of a running VM", err, codes.FailedPrecondition, "is not waiting for a migrating VM")

	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	_, err = p.tgt.MigrationSource(ctx, tgtID)
	wantCode(t, "MigrationSource of a waiting target", err, codes.FailedPrecondition, "only a running VM can migrate")
	if _, err := p.tgt.FinishMigration(ctx, tgtID, "given up"); err != nil {
		t.Fatal(err)
	}
	_, err = p.tgt.PrepareMigration(ctx, tgtID, src)
	wantCode(t, "PrepareMigration of a target that exited", err, codes.FailedPrecondition, "is not waiting for a migrating VM")
}

// TestFinishMigrationBeforeTheVMArrived: a target told its VM arrived
// while none runs here says so (FailedPrecondition) and goes on
// waiting: the migration can still happen.
func TestFinishMigrationBeforeTheVMArrived(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID, tgtID, target := p.preparedVM(t)
	_, err := p.tgt.FinishMigration(ctx, tgtID, "")
	wantCode(t, "FinishMigration before the VM arrived", err, codes.FailedPrecondition, "has not arrived")
	if c := record(t, p.tgtEnv, tgtID); c.State != running || !c.AwaitsMigration() || !p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Fatalf("the target: %s, migration %+v, expecting %v; want it still waiting", c.State, c.Migration, p.tgtEnv.R.Migration.Expecting(tgtID))
	}
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := p.tgt.FinishMigration(ctx, tgtID, ""); err != nil {
		t.Fatalf("FinishMigration once it arrived: %v", err)
	}
}

// TestMigrateWhileMigrating: while a VM leaves, its status is answered
// (the pod's lock is not held) and a second Migrate of it is refused.
func TestMigrateWhileMigrating(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID, _, target := p.preparedVM(t)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	p.srcEnv.Libvirt.SetMigrateHook(func(virt.Migration) error { <-release; return nil })
	done := make(chan error, 1)
	go func() { done <- p.src.Migrate(ctx, srcID, target, nil) }()
	waitFor(t, "the migration to start", func() bool { return len(p.srcEnv.Libvirt.Migrations()) == 1 })

	statusDone := make(chan runtimeapi.ContainerState, 1)
	go func() {
		resp, err := p.source.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: srcID})
		if err != nil {
			statusDone <- runtimeapi.ContainerState_CONTAINER_UNKNOWN
			return
		}
		statusDone <- resp.Status.State
	}()
	select {
	case st := <-statusDone:
		if st != running {
			t.Errorf("status during the migration: %s, want running", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ContainerStatus waits for the migration")
	}
	err := p.src.Migrate(ctx, srcID, target, nil)
	wantCode(t, "a second Migrate", err, codes.FailedPrecondition, "migrating already")
	releaseOnce()
	if err := <-done; err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

// TestMigrationTargetRefusals: a target pod whose VM could not arrive
// is refused at CreateContainer, naming the annotation: virtio-fs shares
// (qemu cannot move their state), or a node with migration off. A node
// with migration off describes no source either.
func TestMigrationTargetRefusals(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	cfg := podConfig(t, "shares")
	cfg.Annotations = map[string]string{"crimux.io/migrate-from": "ns/web"}
	sb := runPod(t, p.target, cfg)
	vc := vmConfig(256, 0, 0)
	vc.Mounts = []*runtimeapi.Mount{{ContainerPath: "/srv/data", HostPath: t.TempDir()}}
	_, err := p.target.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vc, SandboxConfig: cfg})
	wantCode(t, "a target with a share", err, codes.InvalidArgument, "annotations[crimux.io/migrate-from]")
	if !strings.Contains(err.Error(), "virtio-fs") {
		t.Errorf("the refusal does not say why: %v", err)
	}

	srcID := p.sourceVM(t, "web")
	p.srcEnv.R.Migration, p.tgtEnv.R.Migration = nil, nil
	cfg = podConfig(t, "off")
	cfg.Annotations = map[string]string{"crimux.io/migrate-from": "ns/web"}
	sb = runPod(t, p.target, cfg)
	_, err = p.target.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: vmConfig(256, 0, 0), SandboxConfig: cfg})
	wantCode(t, "a target on a node with migration off", err, codes.FailedPrecondition, "annotations[crimux.io/migrate-from]")
	_, err = p.src.MigrationSource(ctx, srcID)
	wantCode(t, "MigrationSource on a node with migration off", err, codes.FailedPrecondition, "live migration is off")
}

// TestMigrationNeedsAQemuIdentity: a VM whose qemu runs as libvirt's
// shared user cannot migrate (its streams' sockets would be every VM's).
func TestMigrationNeedsAQemuIdentity(t *testing.T) {
	s, e := newService(t)
	e.R.Migration = startMigrationNode(t, writeMigrationPKI(t), nil)
	_, id := runningVM(t, s, "web")
	_, err := roomOf(s).MigrationSource(context.Background(), id)
	wantCode(t, "MigrationSource of a VM without an identity", err, codes.FailedPrecondition, "cannot migrate")
}

// TestStoppedTargetTakesNoVM: a prepared target that kubelet stops
// refuses its streams from then on (its node expects the VM no more, its
// socket dir is gone) and exits MigrationFailed; removed, it leaves no
// domain.
func TestStoppedTargetTakesNoVM(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	tgtRec := record(t, p.tgtEnv, tgtID)
	target := p.prepared(t, srcID, tgtID)

	if _, err := p.target.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: tgtID}); err != nil {
		t.Fatalf("StopContainer of a prepared target: %v", err)
	}
	if p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Error("the stopped target's node still expects its VM")
	}
	if _, err := os.Stat(p.tgtEnv.R.Migration.Dir(target.Token)); !os.IsNotExist(err) {
		t.Errorf("the stopped target's socket dir is left: %v", err)
	}
	if st := status(t, p.target, tgtID); st.State != exited || st.Reason != core.ReasonMigrationFailed {
		t.Errorf("the stopped target: %s %q; want exited MigrationFailed", st.State, st.Reason)
	}
	if _, err := p.target.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: tgtID}); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.tgtEnv.Libvirt.Domain(tgtRec.Domain); ok {
		t.Error("the removed target's domain is left")
	}
}

// TestPreparedTargetNotMigratedTimesOut: a prepared target whose
// migration never begins (no arriving domain) exits MigrationFailed once
// the target timeout passes from its preparation, refusing its streams.
func TestPreparedTargetNotMigratedTimesOut(t *testing.T) {
	p := newMigrationPair(t, func(c *migration.Config) { c.TargetTimeout = 300 * time.Millisecond })
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	p.prepared(t, srcID, tgtID)
	waitFor(t, "the prepared target to give up", func() bool { return record(t, p.tgtEnv, tgtID).State == exited })
	if _, reason, msg := containerState(t, p.target, tgtID); reason != core.ReasonMigrationFailed || !strings.Contains(msg, "no migration of its VM began") {
		t.Errorf("the target container: %q, %q; want MigrationFailed saying no migration began", reason, msg)
	}
	if p.tgtEnv.R.Migration.Expecting(tgtID) {
		t.Error("the timed-out target's node still expects its VM")
	}
}

// TestArrivalRecordedWithoutDriver: a VM that arrived is recorded so by
// the target itself when no FinishMigration comes (its driver died after
// the switch-over); a late FinishMigration, even one saying it failed,
// gets the arrival, never a destroyed VM.
func TestArrivalRecordedWithoutDriver(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID, tgtID, target := p.preparedVM(t)
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the target to record its VM arrived", func() bool { return record(t, p.tgtEnv, tgtID).Migration == nil })
	if st := status(t, p.target, tgtID); st.State != running {
		t.Fatalf("the arrived target is %s, want running", st.State)
	}
	if _, err := p.tgt.FinishMigration(ctx, tgtID, ""); err != nil {
		t.Errorf("a late FinishMigration of an arrived VM: %v", err)
	}
	if _, err := p.tgt.FinishMigration(ctx, tgtID, "the driver thought it failed"); err == nil {
		t.Error("a late failed FinishMigration of an arrived VM succeeded")
	}
	if st := status(t, p.target, tgtID); st.State != running {
		t.Errorf("after a late failed FinishMigration the arrived target is %s, want running", st.State)
	}
}

// TestArrivedPodBootsItsDisk: once a pod's VM arrived, a later container
// of the pod (kubelet's restart after the guest powered off) boots the
// disk the VM brought, though the pod still says crimux.io/migrate-from.
func TestArrivedPodBootsItsDisk(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	cfg := podConfig(t, "web-moved")
	cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: "ns/web"}
	sb := runPod(t, p.target, cfg)
	tgtID := createVM(t, p.target, sb, cfg, vmConfig(256, 0, 0))
	startVM(t, p.target, tgtID)
	target := p.prepared(t, srcID, tgtID)
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.tgt.FinishMigration(ctx, tgtID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.target.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: tgtID}); err != nil { // kubelet makes a new one
		t.Fatal(err)
	}
	next := createVM(t, p.target, sb, cfg, vmConfig(256, 0, 0))
	if m := record(t, p.tgtEnv, next).Migration; m != nil {
		t.Fatalf("the pod's next container waits for a migration again: %+v", m)
	}
	startVM(t, p.target, next)
	if d, ok := p.tgtEnv.Libvirt.Domain(record(t, p.tgtEnv, next).Domain); !ok || d.State != virt.StateRunning {
		t.Errorf("the pod's next VM: defined %v, %s; want booted, running", ok, d.State)
	}
}

// TestPrepareRefusesAnotherImage: a target pod of another image than the
// source VM's is refused (the disk's top layer would land on another
// base), naming the field; the target still waits.
func TestPrepareRefusesAnotherImage(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	src, err := p.src.MigrationSource(ctx, srcID)
	if err != nil {
		t.Fatal(err)
	}
	if src.ImageDigest == "" {
		t.Fatal("MigrationSource names no image digest")
	}
	src.ImageDigest = "sha256:" + strings.Repeat("0", 64)
	p.reseal(t, srcID, &src) // a genuine source of another image
	_, err = p.tgt.PrepareMigration(ctx, tgtID, src)
	if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "source.image_digest") {
		t.Fatalf("PrepareMigration of another image: %v; want InvalidArgument naming source.image_digest", err)
	}
	if !record(t, p.tgtEnv, tgtID).AwaitsMigration() {
		t.Error("the target waits no more after a refused preparation")
	}
}

// TestMigrationsCounted: each node counts its migrations' ends for its
// metrics, by role and result.
func TestMigrationsCounted(t *testing.T) {
	p := newMigrationPair(t, nil)
	p.migrate(t)
	if n := p.srcEnv.Counters.Migrations(core.MigrationOutgoing, core.MigrationSucceeded); n != 1 {
		t.Errorf("the source counted %d outgoing migrations succeeded, want 1", n)
	}
	if n := p.tgtEnv.Counters.Migrations(core.MigrationIncoming, core.MigrationSucceeded); n != 1 {
		t.Errorf("the target counted %d incoming migrations succeeded, want 1", n)
	}
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
	if n := p.srcEnv.Counters.Migrations(core.MigrationOutgoing, core.MigrationFailed); n != 1 {
		t.Errorf("the source counted %d outgoing migrations failed, want 1", n)
	}
	if n := p.tgtEnv.Counters.Migrations(core.MigrationIncoming, core.MigrationFailed); n != 1 {
		t.Errorf("the target counted %d incoming migrations failed, want 1", n)
	}
}

// TestPrepareRefusesAnotherShape: a source VM of another size than the
// target pod is refused, naming the field, before the target's own
// domain makes way: it is still defined, and the target still waits.
func TestPrepareRefusesAnotherShape(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	src, err := p.src.MigrationSource(ctx, srcID)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(src.DomainXML); err != nil {
		t.Fatal(err)
	}
	d.VCPU.Value++
	if src.DomainXML, err = d.Marshal(); err != nil {
		t.Fatal(err)
	}
	p.reseal(t, srcID, &src) // a genuine source of another size
	_, err = p.tgt.PrepareMigration(ctx, tgtID, src)
	if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "source.domain_xml") || !strings.Contains(err.Error(), "must match") {
		t.Fatalf("PrepareMigration of a VM of another size: %v; want InvalidArgument naming source.domain_xml", err)
	}
	if _, ok := p.tgtEnv.Libvirt.Domain(record(t, p.tgtEnv, tgtID).Domain); !ok {
		t.Error("the target's own domain was undefined for a refused migration")
	}
	if !record(t, p.tgtEnv, tgtID).AwaitsMigration() {
		t.Error("the target waits no more after a refused preparation")
	}
}

// TestResumeMigrations: at a restart, a source's migration (its streams
// were the crimux that stopped) is forgotten, its VM running on; a
// prepared target whose VM is not there fails, saying crimux restarted.
func TestResumeMigrations(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID := p.sourceVM(t, "web")
	_, tgtID := p.targetVM(t, "web-moved", "ns/web")
	p.prepared(t, srcID, tgtID)
	src := record(t, p.srcEnv, srcID)
	src.Migration = &store.Migration{Token: strings.Repeat("a", 32)}
	if err := p.srcEnv.R.Store.PutContainer(src); err != nil {
		t.Fatal(err)
	}

	p.src.ResumeMigrations(ctx)
	p.tgt.ResumeMigrations(ctx)
	if c := record(t, p.srcEnv, srcID); c.Migration != nil || c.State != running {
		t.Errorf("the source after a restart: %s, migration %+v; want running, none", c.State, c.Migration)
	}
	st := status(t, p.target, tgtID)
	if st.State != exited || st.Reason != core.ReasonMigrationFailed || !strings.Contains(st.Message, "crimux restarted") {
		t.Errorf("the prepared target after a restart: %s %q %q; want exited MigrationFailed, crimux restarted", st.State, st.Reason, st.Message)
	}
}

// TestArrivalNoteForALateDriver: when the target records its VM arrived
// before the driver's FinishMigration (the driver was slow, or died and
// came back), what could not be done on arrival (the guest agent did not
// answer, so the guest keeps its old address) is still in the late
// FinishMigration's answer, which the plugin prints.
func TestArrivalNoteForALateDriver(t *testing.T) {
	p := newMigrationPair(t, nil)
	p.tgt.ReaddressWait = time.Second
	ctx := context.Background()
	srcID, tgtID, target := p.preparedVM(t)
	p.agent.mu.Lock()
	p.agent.fail = errBoom
	p.agent.mu.Unlock()
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the target to record its VM arrived", func() bool { return record(t, p.tgtEnv, tgtID).Migration == nil })
	res, err := p.tgt.FinishMigration(ctx, tgtID, "")
	if err != nil {
		t.Fatalf("a late FinishMigration: %v", err)
	}
	if !strings.Contains(res.Note, "could not give it its new pod's address") {
		t.Errorf("a late FinishMigration's note: %q; want the arrival's (the agent did not answer)", res.Note)
	}
}

// TestArrivedGuestAgentReconnects: an arrived guest's agent that does not
// answer at once (its channel reconnects on the new node) is waited for:
// the guest gets its new pod's address, and no note says otherwise.
func TestArrivedGuestAgentReconnects(t *testing.T) {
	p := newMigrationPair(t, nil)
	ctx := context.Background()
	srcID, tgtID, target := p.preparedVM(t)
	if err := p.src.Migrate(ctx, srcID, target, nil); err != nil {
		t.Fatal(err)
	}
	p.agent.mu.Lock()
	p.agent.silent = 3
	p.agent.mu.Unlock()
	res, err := p.tgt.FinishMigration(ctx, tgtID, "")
	if err != nil {
		t.Fatalf("FinishMigration: %v", err)
	}
	if res.Note != "" || !strings.Contains(p.agent.last(), "ip addr add 10.1.0.5/24") {
		t.Errorf("note %q, last script:\n%s\nwant the new address given once the agent answered", res.Note, p.agent.last())
	}
}
