package rootdisk

import (
	"context"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// A VM whose root disk is on a volume (crimux.io/root-disk; see
// volume.go) boots that volume's disk, not an overlay of its pod: the
// volume is imported into on first use and outlives the pod.

// PlanRootVolume reads the pod's root volume, if it names one: the guest
// gets it as its root disk, through the VM's directory, and not again as
// a disk or a share.
func (r *Room) PlanRootVolume(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig, storage vm.Storage) (*vm.RootVolume, vm.Storage, error) {
	rv, err := vm.RootVolumeFrom(sb.Config.GetAnnotations(), cfg.GetAnnotations(), cfg)
	if err != nil || rv == nil {
		return nil, storage, err
	}
	return rv, storage.Without(rv.ContainerPath), nil
}

// RootVolumeDisk is the domain's root disk of a root volume.
func (r *Room) RootVolumeDisk(rv *vm.RootVolume, vmDir string) *vm.Disk {
	return &vm.Disk{Path: filepath.Join(vmDir, rootvol.AttachName), Format: rv.Format, Block: rv.Block}
}

// MakeRootVolume claims the volume rv for VM rec, makes it hold a disk
// (imported from the image's disk in layout, or kept; a migration
// target's must hold its source's) and gives it to the VM's identity in
// its directory, recording it in rec. imported says the image was.
// The claim ends when CreateContainer does (release): from then on the
// record holds the volume.
func (r *Room) MakeRootVolume(ctx context.Context, sb *store.Sandbox, rec *store.Container, rv *vm.RootVolume,
	layout core.ImageLayout, undo *opguard.Rollback) (release func(), imported bool, err error) {
	key, err := rootvol.Key(rv)
	if err != nil {
		return func() {}, false, err
	}
	release, err = r.ClaimRootVolume(rv, key, rec.ID)
	if err != nil {
		return func() {}, false, err
	}
	rec.RootVolume = &store.RootVolume{ContainerPath: rv.ContainerPath, HostPath: rv.HostPath, Block: rv.Block,
		Format: rv.Format, Key: key, Path: r.RootVolumeDisk(rv, rec.Dir).Path}
	if err := r.Store.PutContainer(rec); err != nil {
		return release, false, err
	}
	src := rootvol.Source{Path: layout.DiskPath, Format: layout.DiskFormat, VirtualSize: layout.DiskVirtualSize}
	note := func(line string) {
		if err := r.Console.Note(rec.ID, rec.LogPath, line); err != nil {
			r.Log.Warn("write to the VM's log", "container", rec.ID, "err", err)
		}
	}
	if rec.Migration != nil { // a VM arriving on its source's volume
		err = arrivingRootVolume(rv, note)
	} else {
		imported, err = r.PrepareRootVolume(ctx, rv, src, note)
	}
	if err != nil {
		return release, imported, err
	}
	return release, imported, r.attachRootVolume(sb, rec, rv, undo)
}

// attachRootVolume binds the volume's disk into VM rec's directory,
// given to the pod's identity.
func (r *Room) attachRootVolume(sb *store.Sandbox, rec *store.Container, rv *vm.RootVolume, undo *opguard.Rollback) error {
	var owner *rootvol.Owner
	if id := sb.Identity; id != nil {
		owner = &rootvol.Owner{UID: int(id.UID), GID: int(id.GID), VMID: r.Opts.Identities.Contains}
	}
	undo.Add("root volume attached", func() error { return rootvol.Release(rec.Dir) })
	if _, err := rootvol.Attach(rv, rec.Dir, owner); err != nil {
		return err
	}
	if given, _ := rootvol.Given(rec.Dir); given && owner != nil {
		r.Log.Warn("the root volume's filesystem has no idmapped mounts: its disk file is the VM identity's while the VM runs, and given back after",
			"container", rec.ID, "volume", rv.HostPath)
	}
	return nil
}

// GiveVolumeSnapshots gives the new domain of VM rec, on a qcow2 root
// volume that held a disk (not imported), the snapshots in it. A failure
// loses only libvirt's metadata (the snapshots stay in the disk) and is
// logged. A migration target's is not given them: its domain makes way
// for the arriving one (libvirt neither undefines nor migrates a domain
// with snapshots), and its source's qemu has the disk open.
func (r *Room) GiveVolumeSnapshots(ctx context.Context, rec *store.Container, imported bool) {
	rv := rec.RootVolume
	if rv == nil || imported || rv.Format != vm.FormatQcow2 || rec.Migration != nil {
		return
	}
	l, err := r.Conn.Get()
	if err != nil {
		return
	}
	dom, err := l.Lookup(rec.Domain)
	if err == nil {
		var n int
		n, err = r.RedefineVolumeSnapshots(ctx, l, dom, rv.Path)
		if n > 0 {
			r.Log.Info("snapshots in the root volume's disk given to its new VM", "container", rec.ID, "snapshots", n)
		}
	}
	if err != nil {
		r.Log.Warn("snapshots in the root volume's disk not given to its new VM", "container", rec.ID, "err", err)
	}
}
