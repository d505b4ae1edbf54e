package migrate

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/vmtypes"
)

// lockSource locks container id, whose VM must run here to leave.
func (r *Room) lockSource(id string) (*store.Container, func(), error) {
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.AwaitsMigration():
		err = fmt.Errorf("container %s is %s: only a running VM can migrate: %w", id, c.State, errdefs.ErrFailedPrecondition)
	case c.Migration != nil:
		err = fmt.Errorf("container %s is migrating already: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return c, unlock, nil
}

// MigrationSource describes container id's running VM for its target.
func (r *Room) MigrationSource(ctx context.Context, id string) (vmtypes.MigrationSource, error) {
	c, unlock, err := r.lockSource(id)
	if err != nil {
		return vmtypes.MigrationSource{}, err
	}
	defer unlock()
	if r.MigrationNode() == nil {
		return vmtypes.MigrationSource{}, ErrOff
	}
	if _, err := r.qemuIdentity(c); err != nil {
		return vmtypes.MigrationSource{}, err
	}
	l, err := r.Conn.Get()
	if err != nil {
		return vmtypes.MigrationSource{}, err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return vmtypes.MigrationSource{}, err
	}
	xml, err := l.MigratableXML(dom)
	if err != nil {
		return vmtypes.MigrationSource{}, err
	}
	src := vmtypes.MigrationSource{DomainXML: xml, ImageDigest: c.ImageDigest}
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil && sb.Net != nil {
		src.GuestMAC = sb.Net.GuestMAC
	}
	if err := r.sealSourceOf(c, &src); err != nil {
		return vmtypes.MigrationSource{}, err
	}
	return src, nil
}

// Migrate moves container id's VM to t. The pod's lock is held while the
// migration is recorded and again when it ends, not while it runs: its
// status, logs and exec go on meanwhile.
func (r *Room) Migrate(ctx context.Context, id string, t vmtypes.MigrationTarget, progress func(vmtypes.MigrationProgress)) error {
	if err := checkTarget(t); err != nil {
		return err
	}
	c, unlock, err := r.lockSource(id)
	if err != nil {
		return err
	}
	if err := r.openTarget(c, t); err != nil {
		unlock()
		return err
	}
	ident, err := r.qemuIdentity(c)
	if err != nil {
		unlock()
		return err
	}
	c.Migration = &store.Migration{Token: t.Token}
	err = r.Store.PutContainer(c)
	unlock()
	if err != nil {
		return err
	}
	began := time.Now()
	l, err := r.Conn.Get()
	if err == nil {
		var dom virt.Domain
		if dom, err = l.Lookup(c.Domain); err == nil {
			r.Log.Info("VM migrating", "container", c.ID, "to", t.Address)
			err = r.MigrationNode().Send(ctx, l, migration.Move{Domain: dom, DestXML: t.DomainXML, DestName: t.DomainName, Disks: t.Disks,
				Token: t.Token, Target: t.Address, TargetLibvirtURI: t.LibvirtURI, UID: int(ident.UID), GID: int(ident.GID),
				SizeBytes: r.vmSize(c)}, func(p virt.MigrationProgress) {
				r.Opts.Counters.MigrationProgress(c.ID, p.DataRemaining, p.DirtyRate)
				if progress != nil {
					progress(progressOf(p))
				}
			})
			if err != nil && r.ShutoffMigrated(l, dom) { // libvirt erred after the switch-over: it runs there
				r.Log.Warn("migration reported failed, but the VM left", "container", c.ID, "err", err)
				err = nil
			}
		}
	}
	return r.migrated(c.ID, t, time.Since(began), err)
}

// migrated records how the migration of container id ended, after took
// (counted and timed): moved, the container exits (Migrated) and its pod
// boots it no more; otherwise the VM runs on here as it was.
func (r *Room) migrated(id string, t vmtypes.MigrationTarget, took time.Duration, migrateErr error) error {
	if migrateErr == nil {
		r.Opts.Counters.MigrationEnded(id, core.MigrationOutgoing, core.MigrationSucceeded)
		r.Opts.Counters.MigrationTook(vmcounters.MigrationSource, core.MigrationSucceeded, took)
		msg := fmt.Sprintf("this VM moved to %s by live migration", t.Address)
		r.Note(id, msg)
		r.MigratedAway(id, msg)
		r.Log.Info("VM migrated", "container", id, "to", t.Address)
		return nil
	}
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return err
	}
	defer unlock()
	c.Migration = nil
	if err := r.Store.PutContainer(c); err != nil {
		r.Log.Error("record a failed migration's end", "container", id, "err", err)
	}
	r.retakeRootVolume(c)
	r.Opts.Counters.MigrationEnded(id, core.MigrationOutgoing, core.MigrationFailed)
	r.Opts.Counters.MigrationTook(vmcounters.MigrationSource, core.MigrationFailed, took)
	r.Log.Info("VM migration failed; the VM runs here", "container", id, "err", migrateErr)
	if errdefs.Code(migrateErr) == codes.Unknown { // libvirt's or qemu's failure on the way
		return fmt.Errorf("migrate to %s: %w (the VM runs here, unchanged): %w", t.Address, migrateErr, errdefs.ErrAborted)
	}
	return fmt.Errorf("migrate to %s: %w", t.Address, migrateErr)
}

// retakeRootVolume gives a file root volume's disk back to VM c's
// identity after a failed migration (RootVolumes).
func (r *Room) retakeRootVolume(c *store.Container) {
	if c.RootVolume == nil || c.RootVolume.Block {
		return
	}
	if err := r.RootVolumes.TakeBackRootVolume(c); err != nil {
		r.Log.Warn("take back the root volume after a failed migration", "container", c.ID, "err", err)
	}
}

// checkTarget refuses a target that names no libvirtd, endpoint or token.
func checkTarget(t vmtypes.MigrationTarget) error {
	switch {
	case t.LibvirtURI == "":
		return errdefs.Invalid("target.libvirt_uri", "must name the target's libvirtd")
	case t.Address == "":
		return errdefs.Invalid("target.address", "must name the target's migration endpoint")
	case len(t.Token) != 32:
		return errdefs.Invalid("target.token", "must be the 32 hex digits the target prepared")
	case t.DomainXML == "" || t.DomainName == "":
		return errdefs.Invalid("target.domain_xml", "must be the domain the target prepared")
	}
	return nil
}

// vmSize is the VM's RAM and root disk's top layer, in bytes.
func (r *Room) vmSize(c *store.Container) uint64 {
	size := c.MemoryMiB << 20
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil && sb.Disk != nil {
		if fi, err := os.Stat(sb.Disk.Path); err == nil {
			size += uint64(fi.Size())
		}
	}
	return size
}

func progressOf(p virt.MigrationProgress) vmtypes.MigrationProgress {
	return vmtypes.MigrationProgress{Elapsed: p.Elapsed, DataTotal: p.DataTotal, DataProcessed: p.DataProcessed,
		DataRemaining: p.DataRemaining, DirtyRate: p.DirtyRate, Iteration: p.Iteration}
}
