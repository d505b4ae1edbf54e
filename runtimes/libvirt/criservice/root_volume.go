package criservice

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
// core/rootvolume.go) boots that volume's disk, not an overlay of its
// pod: the volume is imported into on first use and outlives the pod.

// planRootVolume reads the pod's root volume, if it names one: the guest
// gets it as its root disk, through the VM's directory, and not again as
// a disk or a share.
func planRootVolume(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig, storage vm.Storage) (*vm.RootVolume, vm.Storage, error) {
	rv, err := vm.RootVolumeFrom(sb.Config.GetAnnotations(), cfg.GetAnnotations(), cfg)
	if err != nil || rv == nil {
		return nil, storage, err
	}
	return rv, storage.Without(rv.ContainerPath), nil
}

// rootVolumeDisk is the domain's root disk of a root volume.
func rootVolumeDisk(rv *vm.RootVolume, vmDir string) *vm.Disk {
	return &vm.Disk{Path: filepath.Join(vmDir, rootvol.AttachName), Format: rv.Format, Block: rv.Block}
}

// makeRootVolume claims the volume for the VM, makes it hold a disk
// (imported, or kept; a migration target's must hold its source's) and
// gives it to the VM's identity in its directory.
// The claim ends when CreateContainer does: from then on the record
// holds the volume.
func (r *Service) makeRootVolume(ctx context.Context, sb *store.Sandbox, p *vmPlan, undo *opguard.Rollback) (release func(), err error) {
	rv := p.root
	key, err := rootvol.Key(rv)
	if err != nil {
		return func() {}, err
	}
	release, err = r.ClaimRootVolume(rv, key, p.rec.ID)
	if err != nil {
		return func() {}, err
	}
	p.rec.RootVolume = &store.RootVolume{ContainerPath: rv.ContainerPath, HostPath: rv.HostPath, Block: rv.Block,
		Format: rv.Format, Key: key, Path: p.spec.Disk.Path}
	if err := r.Store.PutContainer(p.rec); err != nil {
		return release, err
	}
	src := rootvol.Source{Path: p.layout.DiskPath, Format: p.layout.DiskFormat, VirtualSize: p.layout.DiskVirtualSize}
	note := func(line string) {
		if err := r.Console.Note(p.rec.ID, p.rec.LogPath, line); err != nil {
			r.Log.Warn("write to the VM's log", "container", p.rec.ID, "err", err)
		}
	}
	if p.rec.Migration != nil { // a VM arriving on its source's volume
		err = core.ArrivingRootVolume(rv, note)
	} else {
		p.rootImported, err = r.PrepareRootVolume(ctx, rv, src, note)
	}
	if err != nil {
		return release, err
	}
	var owner *rootvol.Owner
	if id := sb.Identity; id != nil {
		owner = &rootvol.Owner{UID: int(id.UID), GID: int(id.GID), VMID: r.Opts.Identities.Contains}
	}
	undo.Add("root volume attached", func() error { return rootvol.Release(p.rec.Dir) })
	if _, err = rootvol.Attach(rv, p.rec.Dir, owner); err != nil {
		return release, err
	}
	if given, _ := rootvol.Given(p.rec.Dir); given && owner != nil {
		r.Log.Warn("the root volume's filesystem has no idmapped mounts: its disk file is the VM identity's while the VM runs, and given back after",
			"container", p.rec.ID, "volume", rv.HostPath)
	}
	return release, nil
}

// redefineVolumeSnapshots gives the new domain of a qcow2 root volume
// that held a disk the snapshots in it. A failure loses only libvirt's
// metadata (the snapshots stay in the disk) and is logged. A migration
// target's is not given them: its domain makes way for the arriving one
// (libvirt neither undefines nor migrates a domain with snapshots), and
// its source's qemu has the disk open.
func (r *Service) redefineVolumeSnapshots(ctx context.Context, p *vmPlan) {
	if p.root == nil || p.rootImported || p.root.Format != vm.FormatQcow2 || p.rec.Migration != nil {
		return
	}
	l, err := r.Conn.Get()
	if err != nil {
		return
	}
	dom, err := l.Lookup(p.rec.Domain)
	if err == nil {
		var n int
		n, err = r.RedefineVolumeSnapshots(ctx, l, dom, p.spec.Disk.Path)
		if n > 0 {
			r.Log.Info("snapshots in the root volume's disk given to its new VM", "container", p.rec.ID, "snapshots", n)
		}
	}
	if err != nil {
		r.Log.Warn("snapshots in the root volume's disk not given to its new VM", "container", p.rec.ID, "err", err)
	}
}
