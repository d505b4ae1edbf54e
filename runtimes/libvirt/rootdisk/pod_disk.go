package rootdisk

import (
	"errors"
	"fmt"
	"os"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// A VM pod's root disk belongs to the pod, not to one container: the
// first container of an image with a disk makes it (an overlay over the
// image's disk), a restarted container (attempt N+1) of the same image
// boots it again, snapshots and all, and RemovePodSandbox deletes it. A
// container of another image (the pod's image changed) starts from a new
// disk, as a new pod does. Data meant to outlive the pod belongs on a
// volume (a PVC): see docs/storage.md.

// PodDiskReusable reports whether the pod's root disk can serve a VM of
// the image with manifest digest dgst.
func (r *Room) PodDiskReusable(sb *store.Sandbox, dgst string) bool {
	if sb.Disk == nil || sb.Disk.ImageDigest != dgst || dgst == "" {
		return false
	}
	fi, err := os.Lstat(sb.Disk.Path)
	return err == nil && fi.Mode().IsRegular()
}

// MakePodDisk makes the pod's root disk, disk, for VM rec of the image
// in layout, unless the pod already has one of the same image: reused
// says it has. The record names the disk before the file exists; a
// failure removes the file and forgets it again. A clone's disk is its
// template's, copied by fromTemplate; nil makes an overlay over the
// image's disk.
func (r *Room) MakePodDisk(sb *store.Sandbox, rec *store.Container, disk string, layout core.ImageLayout,
	fromTemplate func(dst string) error, undo *opguard.Rollback) (reused bool, err error) {
	if r.PodDiskReusable(sb, layout.Digest) && sb.Disk.Path == disk {
		r.Log.Info("VM boots its pod's root disk again", "sandbox", sb.ID, "container", rec.ID, "disk", sb.Disk.Path)
		if sb.Disk.Backing == "" { // an older crimux's record: what the header must name from now on
			sb.Disk.Backing, sb.Disk.BackingFormat = layout.DiskPath, layout.DiskFormat
			return true, r.Store.PutSandbox(sb)
		}
		return true, nil
	}
	if err := r.carrier().Forget(sb.ID); err != nil {
		return false, err
	}
	if err := vmfiles.MakePodDir(vmfiles.PodDir(r.Opts.StateDir, sb.ID)); err != nil {
		return false, err
	}
	old := sb.Disk
	sb.Disk = &store.PodDisk{Path: disk, ImageDigest: layout.Digest, Backing: layout.DiskPath, BackingFormat: layout.DiskFormat}
	if err := r.Store.PutSandbox(sb); err != nil {
		sb.Disk = old
		return false, err
	}
	undo.Add("pod root disk", func() error {
		if err := os.Remove(disk); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		sb.Disk = nil
		return r.Store.PutSandbox(sb)
	})
	if old != nil {
		r.Log.Info("the pod's image changed: its VM starts from a new root disk", "sandbox", sb.ID, "old_image", old.ImageDigest, "image", layout.Digest)
	}
	return false, newPodDisk(disk, layout, fromTemplate)
}

// newPodDisk makes the file of a new pod disk: the template's overlay,
// booted, or an overlay over the image's disk.
func newPodDisk(disk string, layout core.ImageLayout, fromTemplate func(dst string) error) error {
	if err := os.Remove(disk); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace root disk %s: %w", disk, err)
	}
	if fromTemplate != nil {
		return fromTemplate(disk)
	}
	// Root's alone (0600) until libvirt hands it to qemu's user at start.
	if err := qcow2.CreateOverlay(disk, layout.DiskPath, layout.DiskFormat, layout.DiskVirtualSize, 0o600); err != nil {
		return fmt.Errorf("create overlay disk %s: %w", disk, err)
	}
	return nil
}

// CarryPodSnapshots gives VM rec, the new VM of the pod's reused root
// disk, the snapshots in it (snapcarry.Carrier): from the pod's
// previous VM while its domain is still defined, else as saved when it
// went. A failure loses only libvirt's metadata (the snapshots stay in
// the disk) and is logged.
func (r *Room) CarryPodSnapshots(sb *store.Sandbox, rec *store.Container) {
	l, err := r.Conn.Get()
	if err == nil {
		err = r.carrySnapshotsWith(l, sb, rec)
	}
	if err != nil {
		r.Log.Warn("snapshots of the pod's root disk not carried to its new VM", "sandbox", sb.ID, "container", rec.ID, "err", err)
	}
}

func (r *Room) carrySnapshotsWith(l virt.Libvirt, sb *store.Sandbox, rec *store.Container) error {
	prev, err := r.carrier().NewestVMOf(sb.ID, rec.ID)
	if err != nil {
		return err
	}
	if prev != nil {
		if err := r.carrier().Save(l, prev); err != nil {
			return err
		}
	}
	dom, err := l.Lookup(rec.Domain)
	if err != nil {
		return err
	}
	n, err := r.carrier().Carry(l, dom, sb.ID)
	if n > 0 {
		r.Log.Info("snapshots carried to the pod's new VM", "sandbox", sb.ID, "container", rec.ID, "snapshots", n)
	}
	return err
}
