package criservice

import (
	"errors"
	"fmt"
	"os"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A VM pod's root disk belongs to the pod, not to one container: the
// first container of an image with a disk makes it (an overlay over the
// image's disk), a restarted container (attempt N+1) of the same image
// boots it again, snapshots and all, and RemovePodSandbox deletes it. A
// container of another image (the pod's image changed) starts from a new
// disk, as a new pod does. Data meant to outlive the pod belongs on a
// volume (a PVC): see docs/storage.md.

// podDiskReusable reports whether the pod's root disk can serve a VM of
// the image with manifest digest dgst.
func podDiskReusable(sb *store.Sandbox, dgst string) bool {
	if sb.Disk == nil || sb.Disk.ImageDigest != dgst || dgst == "" {
		return false
	}
	fi, err := os.Lstat(sb.Disk.Path)
	return err == nil && fi.Mode().IsRegular()
}

// makePodDisk makes the pod's root disk for p, unless the pod already has
// one of the same image. The record names the disk before the file
// exists; a failure removes the file and forgets it again.
func (r *Service) makePodDisk(sb *store.Sandbox, p *vmPlan, undo *opguard.Rollback) error {
	if p.spec.Disk == nil {
		return nil
	}
	if podDiskReusable(sb, p.layout.Digest) && sb.Disk.Path == p.spec.Disk.Path {
		r.Log.Info("VM boots its pod's root disk again", "sandbox", sb.ID, "container", p.rec.ID, "disk", sb.Disk.Path)
		p.reuseDisk = true
		if sb.Disk.Backing == "" { // an older crimux's record: what the header must name from now on
			sb.Disk.Backing, sb.Disk.BackingFormat = p.layout.DiskPath, p.layout.DiskFormat
			return r.Store.PutSandbox(sb)
		}
		return nil
	}
	if err := r.ForgetSnapshots(sb.ID); err != nil {
		return err
	}
	if err := core.MakePodDir(r.PodDir(sb.ID)); err != nil {
		return err
	}
	old := sb.Disk
	sb.Disk = &store.PodDisk{Path: p.spec.Disk.Path, ImageDigest: p.layout.Digest,
		Backing: p.layout.DiskPath, BackingFormat: p.layout.DiskFormat}
	if err := r.Store.PutSandbox(sb); err != nil {
		sb.Disk = old
		return err
	}
	undo.Add("pod root disk", func() error {
		if err := os.Remove(p.spec.Disk.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		sb.Disk = nil
		return r.Store.PutSandbox(sb)
	})
	if old != nil {
		r.Log.Info("the pod's image changed: its VM starts from a new root disk", "sandbox", sb.ID, "old_image", old.ImageDigest, "image", p.layout.Digest)
	}
	if err := os.Remove(p.spec.Disk.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace root disk %s: %w", p.spec.Disk.Path, err)
	}
	if p.rec.Clone != nil { // the template's overlay, booted
		return r.Instant.CopyDisk(p.rec.Clone.Key, p.spec.Disk.Path)
	}
	// Root's alone (0600) until libvirt hands it to qemu's user at start.
	if err := qcow2.CreateOverlay(p.spec.Disk.Path, p.layout.DiskPath, p.layout.DiskFormat, p.layout.DiskVirtualSize, 0o600); err != nil {
		return fmt.Errorf("create overlay disk %s: %w", p.spec.Disk.Path, err)
	}
	return nil
}

// carrySnapshots gives the new VM of a reused root disk the snapshots in
// it (core.CarrySnapshots): from the pod's previous VM while its domain is
// still defined, else as saved when it went. A failure loses only
// libvirt's metadata (the snapshots stay in the disk) and is logged.
func (r *Service) carrySnapshots(sb *store.Sandbox, p *vmPlan) {
	if !p.reuseDisk {
		return
	}
	l, err := r.Conn.Get()
	if err == nil {
		err = r.carrySnapshotsWith(l, sb, p)
	}
	if err != nil {
		r.Log.Warn("snapshots of the pod's root disk not carried to its new VM", "sandbox", sb.ID, "container", p.rec.ID, "err", err)
	}
}

func (r *Service) carrySnapshotsWith(l virt.Libvirt, sb *store.Sandbox, p *vmPlan) error {
	prev, err := r.NewestVMOf(sb.ID, p.rec.ID)
	if err != nil {
		return err
	}
	if prev != nil {
		if err := r.SaveSnapshots(l, prev); err != nil {
			return err
		}
	}
	dom, err := l.Lookup(p.rec.Domain)
	if err != nil {
		return err
	}
	n, err := r.CarrySnapshots(l, dom, sb.ID)
	if n > 0 {
		r.Log.Info("snapshots carried to the pod's new VM", "sandbox", sb.ID, "container", p.rec.ID, "snapshots", n)
	}
	return err
}
