package rootdisk

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A VM's root disk on a volume (runtimes/libvirt/rootvol): at
// CreateContainer the volume is claimed (no other live VM of the node has
// it), examined, imported into when it holds nothing, and attached in the
// VM's directory; before every start its disk is examined again (qemu
// writes it: a header naming a backing file is refused, as an overlay's).
//
// A qcow2 disk kept as it is brings its internal snapshots, made by an
// earlier VM or by anyone writing the volume, and each is given to the
// new VM's libvirt domain (RedefineVolumeSnapshots), where the VM API
// counts it against the cap of a VM's snapshots: a disk holding more than
// the cap is refused at CreateContainer, and no more than the cap are
// ever given to a domain.

// volumeClaims are the root volumes CreateContainers are preparing, by
// key: the store has no record of them yet.
type volumeClaims struct {
	mu   sync.Mutex
	keys map[string]string // key -> container ID
}

// ClaimRootVolume refuses a volume another VM of the node has that is not
// exited (a live VM, or one being created), and holds it for container
// id until release. A VM pod replacing its own exited VM keeps it.
func (r *Room) ClaimRootVolume(v *vm.RootVolume, key, id string) (release func(), err error) {
	r.claims.mu.Lock()
	defer r.claims.mu.Unlock()
	if other, ok := r.claims.keys[key]; ok {
		return nil, r.volumeBusy(v, other)
	}
	all, err := r.Store.Containers()
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.RootVolume != nil && c.RootVolume.Key == key && !c.Removing && c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return nil, r.volumeBusy(v, c.ID)
		}
	}
	if r.claims.keys == nil {
		r.claims.keys = map[string]string{}
	}
	r.claims.keys[key] = id
	return func() {
		r.claims.mu.Lock()
		delete(r.claims.keys, key)
		r.claims.mu.Unlock()
	}, nil
}

func (r *Room) volumeBusy(v *vm.RootVolume, other string) error {
	pod := ""
	if c, err := r.Store.Container(other); err == nil {
		if sb, err := r.Store.Sandbox(c.SandboxID); err == nil {
			pod = " of pod " + core.PodName(sb.Config)
		}
	}
	return fmt.Errorf("root disk %s (%s): the volume is the root disk of VM %s%s, which is not stopped: two VMs never write one disk; "+
		"stop that VM first (a ReadWriteMany claim cannot be the root disk of two running VMs): %w",
		v.ContainerPath, v.HostPath, other, pod, errdefs.ErrFailedPrecondition)
}

// progressEvery is how often an import writes its progress to the log.
const progressEvery = 3 * time.Second

// PrepareRootVolume makes the volume hold a disk for the VM: imported
// from the image's disk (src) when it holds nothing or an unfinished
// import, kept as it is when it holds a disk; a disk holding more
// snapshots than a VM may have (MaxSnapshots) is refused, since each
// would be given to the new VM. What it does goes to the VM's log
// (kubectl logs) through note. imported says which.
func (r *Room) PrepareRootVolume(ctx context.Context, v *vm.RootVolume, src rootvol.Source, note func(string)) (imported bool, err error) {
	content, capacity, err := rootvol.Inspect(v, rootvol.MaxSnapshots(r.MaxSnapshots()))
	if err != nil {
		return false, err
	}
	if content.Holds == rootvol.Disk {
		snaps := ""
		if content.Snapshots > 0 {
			snaps = fmt.Sprintf(" with %d internal snapshots", content.Snapshots)
		}
		note(fmt.Sprintf("crimux: root disk %s (%s) holds a %s disk of %s%s: booting it as it is, the image is not imported",
			v.ContainerPath, v.HostPath, v.Format, core.ShortBytes(content.VirtualSize), snaps))
		return false, nil
	}
	if src.Path == "" {
		return false, fmt.Errorf("root disk %s (%s) is empty and the image has no disk to import into it: %w", v.ContainerPath, v.HostPath, errdefs.ErrFailedPrecondition)
	}
	size, err := rootvol.DiskSize(v, capacity, src)
	if err != nil {
		return false, err
	}
	if content.Holds == rootvol.Unfinished {
		note(fmt.Sprintf("crimux: root disk %s (%s) holds an import that did not finish: importing again", v.ContainerPath, v.HostPath))
	}
	start := time.Now()
	last := start
	note(fmt.Sprintf("crimux: importing the image's disk (%s) into root disk %s (%s) as a %s disk of %s",
		core.ShortBytes(src.VirtualSize), v.ContainerPath, v.HostPath, v.Format, core.ShortBytes(size)))
	err = rootvol.Import(ctx, v, src, size, func(pct float64) {
		if time.Since(last) >= progressEvery {
			last = time.Now()
			note(fmt.Sprintf("crimux: importing: %s of %s (%.0f%%)", core.ShortBytes(int64(pct/100*float64(src.VirtualSize))), core.ShortBytes(src.VirtualSize), pct))
		}
	})
	if err != nil {
		note("crimux: import failed: " + err.Error())
		return false, err
	}
	took := time.Since(start)
	note(fmt.Sprintf("crimux: imported %s into root disk %s in %s", core.ShortBytes(src.VirtualSize), v.ContainerPath, took.Round(100*time.Millisecond)))
	r.Log.Info("root volume imported", "volume", v.HostPath, "container_path", v.ContainerPath, "format", v.Format,
		"size", size, "took", took)
	return true, nil
}

// arrivingRootVolume checks the root volume of a migration target (a
// durable VM arriving live): it must hold the source VM's disk already,
// shared storage both nodes reach. Nothing is imported or written: the
// source's qemu is writing the disk. Its snapshots are not capped: none
// is given to the arriving domain (GiveVolumeSnapshots skips a
// migration target), and the source's VM API capped them.
func arrivingRootVolume(v *vm.RootVolume, note func(string)) error {
	content, _, err := rootvol.Inspect(v)
	if err != nil {
		return err
	}
	if content.Holds != rootvol.Disk {
		return fmt.Errorf("root disk %s (%s) holds no disk: a VM arriving by live migration runs on its source's root volume, "+
			"which must be shared storage both nodes reach (the same volume in the target pod); nothing is imported into it: %w",
			v.ContainerPath, v.HostPath, errdefs.ErrFailedPrecondition)
	}
	note(fmt.Sprintf("crimux: root disk %s (%s) holds a %s disk of %s: the VM arriving by live migration runs on it, shared with its source, not copied",
		v.ContainerPath, v.HostPath, v.Format, core.ShortBytes(content.VirtualSize)))
	return nil
}

// CheckRootVolume examines the root volume of VM c before it starts: it
// must hold a disk crimux would boot (qemu may have rewritten its header).
// Its snapshots are not capped: a start gives libvirt none, and a VM at
// its cap when the cap is lowered still starts.
func (r *Room) CheckRootVolume(c *store.Container) error {
	rv := c.RootVolume
	if rv == nil {
		return nil
	}
	v := volumeOf(rv)
	content, _, err := rootvol.Inspect(v)
	if err == nil && content.Holds != rootvol.Disk {
		err = fmt.Errorf("root disk %s (%s) holds no disk any more: %w", v.ContainerPath, v.HostPath, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("VM %s not started: %w", c.ID, err)
	}
	return nil
}

// volumeOf is the converter's view of a recorded root volume.
func volumeOf(rv *store.RootVolume) *vm.RootVolume {
	return &vm.RootVolume{ContainerPath: rv.ContainerPath, HostPath: rv.HostPath, Block: rv.Block, Format: rv.Format, Field: "root volume"}
}

// RedefineVolumeSnapshots gives dom, a new domain on a qcow2 root
// volume, libvirt's metadata of the snapshots the disk holds (made by an
// earlier VM, perhaps of an earlier pod): each with dom's own definition,
// the newest current. It returns how many. No more than MaxSnapshots are
// given, the newest: PrepareRootVolume refused a disk holding more, but
// the volume is the tenant's to write until the VM's qemu has it; the
// others stay in the disk, and the error says so.
func (r *Room) RedefineVolumeSnapshots(ctx context.Context, l virt.Libvirt, dom virt.Domain, diskPath string) (int, error) {
	snaps, err := rootvol.Snapshots(ctx, diskPath)
	if err != nil || len(snaps) == 0 {
		return 0, err
	}
	var over error
	if limit := r.MaxSnapshots(); len(snaps) > limit {
		over = fmt.Errorf("the disk holds %d internal snapshots, more than a VM may have (libvirt.max_snapshots_per_vm = %d): "+
			"the %d oldest are not given to the VM (they stay in the disk; qemu-img snapshot -d deletes one, with no VM running on it): %w",
			len(snaps), limit, len(snaps)-limit, errdefs.ErrFailedPrecondition)
		snaps = snaps[len(snaps)-limit:]
	}
	doc, err := l.XML(dom)
	if err != nil {
		return 0, err
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(doc); err != nil {
		return 0, err
	}
	for i, s := range snaps {
		x := libvirtxml.DomainSnapshot{Name: s.Name, CreationTime: fmt.Sprint(s.Created.Unix()), State: "shutoff", Domain: &def,
			Disks: &libvirtxml.DomainSnapshotDisks{Disks: []libvirtxml.DomainSnapshotDisk{{Name: "vda", Snapshot: "internal"}}}}
		if s.VMState {
			x.State = "running"
			x.Memory = &libvirtxml.DomainSnapshotMemory{Snapshot: "internal"}
		}
		out, err := x.Marshal()
		if err != nil {
			return i, err
		}
		if _, err := l.RedefineSnapshot(dom, out, i == len(snaps)-1); err != nil {
			return i, fmt.Errorf("redefine snapshot %q on %s: %w", s.Name, dom.Name, err)
		}
	}
	return len(snaps), over
}
