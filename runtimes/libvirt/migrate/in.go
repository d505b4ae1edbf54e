package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// A migration target is a VM pod made with the annotation
// crimux.io/migrate-from. Its container is created as any VM's (its
// disk, cloud-init volume, console, cgroup) but its VM is not booted:
// StartContainer marks it running with no qemu, waiting; PrepareMigration
// readies the streams and the domain the source's VM becomes here;
// FinishMigration records the VM arrived (and gives it its new pod's
// network) or exits the container, MigrationFailed.

// incomingFile keeps the target's own domain definition once
// PrepareMigration has undefined it for the arriving one.
const incomingFile = "incoming.xml"

// ErrOff: this node has no migration endpoint (libvirt.migration unset).
var ErrOff = fmt.Errorf("live migration is off on this node (libvirt.migration): %w", errdefs.ErrFailedPrecondition)

// ErrIncomingOff refuses a migration target on a node with migration off,
// naming the annotation that asked for it.
var ErrIncomingOff = fmt.Errorf("annotations[%s]: %w", vm.AnnotationMigrateFrom, ErrOff)

// PlanIncoming makes rec, the container of a VM pod with opts and
// storage, a migration target, or says why its VM cannot arrive by
// migration. A root disk on a volume (a durable VM) arrives on it,
// shared with the source, not copied: nothing is imported into it.
func (r *Room) PlanIncoming(rec *store.Container, opts vm.Options, storage vm.Storage) error {
	field := "annotations[" + vm.AnnotationMigrateFrom + "]"
	switch {
	case r.MigrationNode() == nil:
		return ErrIncomingOff
	case len(storage.Shares) > 0:
		return errdefs.Invalid(field, "a VM with virtio-fs shares cannot migrate (qemu cannot move their state)")
	case len(storage.Devices) > 0:
		return errdefs.Invalid(field, "a VM with block volumes cannot migrate yet")
	}
	rec.Migration = &store.Migration{Incoming: true, From: opts.MigrateFrom}
	return nil
}

// AwaitIncoming is StartContainer of a migration target: its cgroup and
// console are made, and it runs with no qemu until its VM arrives or
// the target timeout ends.
func (r *Room) AwaitIncoming(c *store.Container) error {
	if r.MigrationNode() == nil {
		return ErrIncomingOff
	}
	cg := r.CgroupOf(c)
	if err := r.Cgroups.Create(cg); err != nil {
		return fmt.Errorf("cgroup of %s: %w", c.Domain, err)
	}
	r.Console.Start(c.ID, c.Dir, c.LogPath)
	timeout := r.MigrationNode().Config().TargetTimeout
	c.State, c.StartedAt = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now().UnixNano()
	c.Migration.Deadline = time.Now().Add(timeout).UnixNano()
	if err := r.Store.PutContainer(c); err != nil {
		r.Console.Stop(c.ID)
		_ = r.Cgroups.Remove(cg)
		return err
	}
	r.Events.Publish(r.Event(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	r.Note(c.ID, fmt.Sprintf("waiting for this VM to arrive from %s by live migration (at most %s)", c.Migration.From, timeout))
	time.AfterFunc(timeout, func() { r.targetTimedOut(c.ID) })
	r.Log.Info("VM migration target waiting", "container", c.ID, "from", c.Migration.From)
	return nil
}

// targetTimedOut ends a target whose migration was not prepared in
// time; a prepared one is watched by watchArrival.
func (r *Room) targetTimedOut(id string) {
	c, unlock, err := r.lockTarget(id)
	if err != nil {
		return
	}
	defer unlock()
	if c.Migration.Token != "" {
		return
	}
	if err := r.FailTarget(c, "no migration of its VM was prepared within the target timeout"); err != nil {
		r.Log.Warn("end a migration target past its timeout", "container", id, "err", err)
	}
}

var errNotWaiting = fmt.Errorf("is not waiting for a migrating VM: %w", errdefs.ErrFailedPrecondition)

// lockTarget locks target container id, waiting for its VM.
func (r *Room) lockTarget(id string) (*store.Container, func(), error) {
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return nil, nil, err
	}
	if !c.AwaitsMigration() || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		unlock()
		return nil, nil, fmt.Errorf("container %s (%s) %w", id, c.State, errNotWaiting)
	}
	return c, unlock, nil
}

// PrepareMigration readies target container id for the VM src: the
// domain src becomes here (the target's own, defined at CreateContainer,
// makes way for it: libvirt defines the arriving one), the grant for its
// qemu's placement, and the streams' sockets and token. src must be
// sealed by a node of the cluster (GetMigrationSource), and the answer
// is sealed by this one.
func (r *Room) PrepareMigration(ctx context.Context, id string, src vmtypes.MigrationSource) (vmtypes.MigrationTarget, error) {
	c, unlock, err := r.lockTarget(id)
	if err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	defer unlock()
	tg, err := r.arrivingDomain(c, src)
	if err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	if err := r.RootVolumes.CheckRootVolume(c); err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	ident, err := r.qemuIdentity(c)
	if err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	if err := r.makeWay(c); err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	disarm, err := r.ArmIncoming(c)
	if err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	if tg.Token, err = r.MigrationNode().Expect(c.ID, int(ident.UID), int(ident.GID), disarm); err != nil {
		disarm()
		return vmtypes.MigrationTarget{}, err
	}
	if err := r.recordPrepared(c, src, &tg); err != nil {
		r.MigrationNode().Forget(c.ID)
		return vmtypes.MigrationTarget{}, err
	}
	go r.watchArrival(c.ID, tg.Token)
	r.Log.Info("VM migration target prepared", "container", c.ID, "from", c.Migration.From)
	return tg, nil
}

// arrivingDomain checks src (its seal, its image) and makes the domain
// it becomes here, from the target's own definition's host settings.
func (r *Room) arrivingDomain(c *store.Container, src vmtypes.MigrationSource) (vmtypes.MigrationTarget, error) {
	if err := r.openSource(c, src); err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	if src.ImageDigest != "" && c.ImageDigest != "" && src.ImageDigest != c.ImageDigest {
		return vmtypes.MigrationTarget{}, errdefs.Invalid("source.image_digest", "the source VM's image is %s, the target pod's %s (%s): they must be the same",
			src.ImageDigest, c.ImageDigest, c.ImageRef)
	}
	own, err := r.incomingDefinition(c)
	if err != nil {
		return vmtypes.MigrationTarget{}, err
	}
	xml, err := vm.MigrationXML(src.DomainXML, own)
	if err != nil {
		return vmtypes.MigrationTarget{}, errdefs.Invalid("source.domain_xml", "%v", err)
	}
	disks, err := vm.MigrationDisks(src.DomainXML)
	if err != nil {
		return vmtypes.MigrationTarget{}, errdefs.Invalid("source.domain_xml", "%v", err)
	}
	cfg := r.MigrationNode().Config()
	return vmtypes.MigrationTarget{LibvirtURI: cfg.LibvirtURI, Address: cfg.Address, DomainXML: xml, DomainName: c.Domain, Disks: disks}, nil
}

// recordPrepared seals tg and records the target prepared: its token,
// the guest's MAC it brings, and the deadline for the migration to begin.
func (r *Room) recordPrepared(c *store.Container, src vmtypes.MigrationSource, tg *vmtypes.MigrationTarget) error {
	if err := r.sealTargetOf(c, tg); err != nil {
		return err
	}
	c.Migration.Token, c.Migration.SourceMAC = tg.Token, src.GuestMAC
	now := time.Now()
	c.Migration.Deadline, c.Migration.PreparedAt = now.Add(r.MigrationNode().Config().TargetTimeout).UnixNano(), now.UnixNano()
	return r.Store.PutContainer(c)
}

// incomingDefinition is the target's own domain definition, kept in its
// directory (incoming.xml) for as long as the target waits: makeWay
// undefines the domain for the arriving one.
func (r *Room) incomingDefinition(c *store.Container) (string, error) {
	path := filepath.Join(c.Dir, incomingFile)
	if b, err := os.ReadFile(path); err == nil {
		return string(b), nil
	}
	l, err := r.Conn.Get()
	if err != nil {
		return "", err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return "", fmt.Errorf("the target's domain %s: %w", c.Domain, err)
	}
	own, err := l.XML(dom)
	if err != nil {
		return "", err
	}
	return own, os.WriteFile(path, []byte(own), 0o600)
}

// makeWay undefines the target's own domain (never started): libvirt
// defines the arriving one under its name. Gone already is fine.
func (r *Room) makeWay(c *store.Container) error {
	l, err := r.Conn.Get()
	if err != nil {
		return err
	}
	dom, err := l.Lookup(c.Domain)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err == nil {
		err = l.Undefine(dom)
	}
	if err != nil {
		return fmt.Errorf("make way for the arriving domain %s: %w", c.Domain, err)
	}
	return nil
}

// qemuIdentity is the uid and gid VM c's qemu runs as: a migration's
// sockets are its alone.
func (r *Room) qemuIdentity(c *store.Container) (*store.VMIdentity, error) {
	ident, ok := r.IdentityForDomain(c.Domain)
	if !ok || ident == nil {
		return nil, fmt.Errorf("VM %s runs as libvirt's shared qemu user (libvirt.vm_id_count = 0): it cannot migrate: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	return ident, nil
}

// FinishMigration ends target container id's wait: with failed "" its VM
// has arrived and takes its pod's network; otherwise the container exits
// with reason MigrationFailed, and whatever of the VM reached this node
// goes.
func (r *Room) FinishMigration(ctx context.Context, id, failed string) (vmtypes.MigrationResult, error) {
	c, unlock, err := r.lockTarget(id)
	if errors.Is(err, errNotWaiting) && failed == "" {
		return r.arrivedBefore(id, err)
	}
	if err != nil {
		return vmtypes.MigrationResult{}, err
	}
	defer unlock()
	if failed != "" && !r.arrivedRunning(c) {
		return vmtypes.MigrationResult{}, r.FailTarget(c, failed)
	}
	if failed != "" {
		r.Log.Warn("told a migration failed, but its VM runs here: recorded arrived", "container", c.ID, "told", failed)
	}
	return r.arrived(ctx, c)
}
