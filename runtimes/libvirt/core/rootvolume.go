package core

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
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

// DefaultMaxSnapshotsPerVM caps a VM's snapshots when
// Options.MaxSnapshotsPerVM is 0 (config's default too). It is here, and
// not only in vmops (which enforces the cap on the VM API), because the
// cap is core's option and core, below vmops, enforces it on a root
// volume's disk too.
const DefaultMaxSnapshotsPerVM = 8

// MaxSnapshots is the cap of a VM's snapshots: the one a reload set,
// else Opts.MaxSnapshotsPerVM, 0 being DefaultMaxSnapshotsPerVM.
func (r *Runtime) MaxSnapshots() int {
	if n := r.snapshotCap.Load(); n > 0 {
		return int(n)
	}
	if n := r.Opts.MaxSnapshotsPerVM; n > 0 {
		return n
	}
	return DefaultMaxSnapshotsPerVM
}

// SetMaxSnapshots makes n the cap of every VM's snapshots from now on (0
// is DefaultMaxSnapshotsPerVM): the next snapshot taken, and the next
// root volume examined, count against it. Snapshots beyond a lowered cap
// are kept; no more is taken until enough are deleted.
func (r *Runtime) SetMaxSnapshots(n int) {
	if n <= 0 {
		n = DefaultMaxSnapshotsPerVM
	}
	r.snapshotCap.Store(int64(n))
}

// volumeClaims are the root volumes CreateContainers are preparing, by
// key: the store has no record of them yet.
type volumeClaims struct {
	mu   sync.Mutex
	keys map[string]string // key -> container ID
}

// ClaimRootVolume refuses a volume another VM of the node has that is not
// exited (a live VM, or one being created), and holds it for container
// id until release. A VM pod replacing its own exited VM keeps it.
func (r *Runtime) ClaimRootVolume(v *vm.RootVolume, key, id string) (release func(), err error) {
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

func (r *Runtime) volumeBusy(v *vm.RootVolume, other string) error {
	pod := ""
	if c, err := r.Store.Container(other); err == nil {
		if sb, err := r.Store.Sandbox(c.SandboxID); err == nil {
			pod = " of pod " + PodName(sb.Config)
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
func (r *Runtime) PrepareRootVolume(ctx context.Context, v *vm.RootVolume, src rootvol.Source, note func(string)) (imported bool, err error) {
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
			v.ContainerPath, v.HostPath, v.Format, shortBytes(content.VirtualSize), snaps))
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
		shortBytes(src.VirtualSize), v.ContainerPath, v.HostPath, v.Format, shortBytes(size)))
	err = rootvol.Import(ctx, v, src, size, func(pct float64) {
		if time.Since(last) >= progressEvery {
			last = time.Now()
			note(fmt.Sprintf("crimux: importing: %s of %s (%.0f%%)", shortBytes(int64(pct/100*float64(src.VirtualSize))), shortBytes(src.VirtualSize), pct))
		}
	})
	if err != nil {
		note("crimux: import failed: " + err.Error())
		return false, err
	}
	took := time.Since(start)
	note(fmt.Sprintf("crimux: imported %s into root disk %s in %s", shortBytes(src.VirtualSize), v.ContainerPath, took.Round(100*time.Millisecond)))
	r.Log.Info("root volume imported", "volume", v.HostPath, "container_path", v.ContainerPath, "format", v.Format,
		"size", size, "took", took)
	return true, nil
}

// ArrivingRootVolume checks the root volume of a migration target (a
// durable VM arriving live): it must hold the source VM's disk already,
// shared storage both nodes reach. Nothing is imported or written: the
// source's qemu is writing the disk. Its snapshots are not capped: none
// is given to the arriving domain (redefineVolumeSnapshots skips a
// migration target), and the source's VM API capped them.
func ArrivingRootVolume(v *vm.RootVolume, note func(string)) error {
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
		v.ContainerPath, v.HostPath, v.Format, shortBytes(content.VirtualSize)))
	return nil
}

// CheckRootVolume examines the root volume of VM c before it starts: it
// must hold a disk crimux would boot (qemu may have rewritten its header).
// Its snapshots are not capped: a start gives libvirt none, and a VM at
// its cap when the cap is lowered still starts.
func CheckRootVolume(c *store.Container) error {
	rv := c.RootVolume
	if rv == nil {
		return nil
	}
	v := VolumeOf(rv)
	content, _, err := rootvol.Inspect(v)
	if err == nil && content.Holds != rootvol.Disk {
		err = fmt.Errorf("root disk %s (%s) holds no disk any more: %w", v.ContainerPath, v.HostPath, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return fmt.Errorf("VM %s not started: %w", c.ID, err)
	}
	return nil
}

// VolumeOf is the converter's view of a recorded root volume.
func VolumeOf(rv *store.RootVolume) *vm.RootVolume {
	return &vm.RootVolume{ContainerPath: rv.ContainerPath, HostPath: rv.HostPath, Block: rv.Block, Format: rv.Format, Field: "root volume"}
}

// RedefineVolumeSnapshots gives dom, a new domain on a qcow2 root
// volume, libvirt's metadata of the snapshots the disk holds (made by an
// earlier VM, perhaps of an earlier pod): each with dom's own definition,
// the newest current. It returns how many. No more than MaxSnapshots are
// given, the newest: PrepareRootVolume refused a disk holding more, but
// the volume is the tenant's to write until the VM's qemu has it; the
// others stay in the disk, and the error says so.
func (r *Runtime) RedefineVolumeSnapshots(ctx context.Context, l virt.Libvirt, dom virt.Domain, diskPath string) (int, error) {
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

// HumanBytes writes a size in the largest binary unit it fills.
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	return strconv.FormatFloat(f, 'f', -1, 64) + " " + units[i]
}

// shortBytes writes a size with one decimal in the largest binary unit
// it fills (the import's log lines).
func shortBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

// RemoveVMDir removes a VM's directory, a root volume's attachment in it
// first (a bind mount would stop the removal; the volume is not the VM
// directory's to remove).
func RemoveVMDir(dir string) error {
	if err := rootvol.Release(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
