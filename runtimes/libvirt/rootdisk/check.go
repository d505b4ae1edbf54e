package rootdisk

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// CheckRootDisk refuses to start VM c when its pod's root disk names a
// backing file (or a data file) other than the image's disk it was made
// over: qemu, which writes the disk, may have rewritten its header (see
// runtimes/libvirt/qcow2). The disk is left as it is, for inspection; the
// error is FailedPrecondition and names the disk. A pod record of an older
// crimux, which did not record the backing file, must name one in the
// image cache. A VM without a root disk has nothing to check. A root
// volume is examined (CheckRootVolume) and given to the VM's identity
// (TakeBackRootVolume).
func (r *Room) CheckRootDisk(c *store.Container) error {
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	if c.RootVolume != nil {
		if err := r.CheckRootVolume(c); err != nil {
			return err
		}
		return giveRootVolume(sb, c)
	}
	if sb.Disk == nil {
		return nil
	}
	if sb.Disk.Backing != "" {
		err = qcow2.CheckOverlay(sb.Disk.Path, qcow2.Backing{Path: sb.Disk.Backing, Format: sb.Disk.BackingFormat})
	} else {
		err = r.checkLegacyRootDisk(sb.Disk.Path)
	}
	if err == nil {
		return nil
	}
	r.Log.Error("VM's root disk names a file crimux did not give it: not started; the disk is kept for inspection",
		"container", c.ID, "disk", sb.Disk.Path, "err", err)
	if errors.Is(err, qcow2.ErrHeaderChanged) {
		return fmt.Errorf("VM %s not started: its root disk was changed (a compromised qemu?) and is kept for inspection: %w: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("VM %s not started: check its root disk: %w", c.ID, err)
}

// checkLegacyRootDisk: the backing file must be in the image cache.
func (r *Room) checkLegacyRootDisk(path string) error {
	b, err := qcow2.Inspect(path)
	if err != nil {
		return err
	}
	cache := filepath.Join(r.Opts.StateDir, "images") + "/"
	if b.Path != filepath.Clean(b.Path) || !strings.HasPrefix(b.Path, cache) || (b.Format != "qcow2" && b.Format != "raw") {
		return fmt.Errorf("%s: backing file %q (format %q) is not an image's disk in %s: %w", path, b.Path, b.Format, cache, qcow2.ErrHeaderChanged)
	}
	return nil
}

// TakeBackRootVolume gives the attachment of VM c's root volume to the
// VM's identity again. A migration target on another node may have given
// a file volume's disk (one inode, both nodes') to its own VM's; the
// running qemu has it open and never notices, a qemu started later must
// be able to open it. Before every start, and after a failed migration.
func (r *Room) TakeBackRootVolume(c *store.Container) error {
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return err
	}
	return giveRootVolume(sb, c)
}

func giveRootVolume(sb *store.Sandbox, c *store.Container) error {
	if !c.RootVolume.Block {
		// A disk file reached through an idmapped mount is never given:
		// only the fallback's is.
		if given, err := rootvol.Given(c.Dir); err != nil || !given {
			return err
		}
	}
	return vmidentity.GiveTo(sb.Identity, filepath.Join(c.Dir, rootvol.AttachName))
}
