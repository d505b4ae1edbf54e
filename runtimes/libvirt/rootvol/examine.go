package rootvol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/vmimage"
)

// What a volume holds.
type Holds int

const (
	// Nothing: its first MiB is zero (or there is no disk file yet).
	Nothing Holds = iota
	// Disk: a disk of the format asked for, checked: it boots as it is.
	Disk
	// Unfinished: an import crimux began and did not finish.
	Unfinished
)

// Content is what Examine found.
type Content struct {
	Holds Holds
	// VirtualSize is the size of the disk the guest sees (a Disk's).
	VirtualSize int64
	// Snapshots is how many internal snapshots a qcow2 Disk's header
	// says it holds.
	Snapshots int
}

// headProbe is how much of a volume decides whether it holds nothing.
const headProbe = 1 << 20

// qcow2 header facts.
var qcow2Magic = []byte("QFI\xfb")

const (
	qcow2SnapshotsOffset = 60      // nb_snapshots, v2 and v3
	qcow2CompatOffset    = 80      // compatible_features, v3
	importingBit         = 1 << 63 // crimux's: an import under way
)

// An Option is a further check Examine makes of a disk it would boot.
type Option func(*checks)

type checks struct {
	maxSnapshots int // 0: as many as a qcow2 may hold
}

// MaxSnapshots refuses a qcow2 disk holding more than n internal
// snapshots (n > 0): a VM's cap (libvirt.max_snapshots_per_vm), given
// when a new VM is made on the volume, since each snapshot in the disk
// is then given to the VM's libvirt domain, where the VM API counts it
// (and libvirtd keeps it in memory). A VM already made starts whatever
// its disk holds: it gives libvirt nothing new.
func MaxSnapshots(n int) Option { return func(c *checks) { c.maxSnapshots = n } }

// Examine reads what the volume holds (capacity: Capacity's). A volume
// holding anything but nothing, a disk of the format the pod asks for,
// or crimux's unfinished import is refused, FailedPrecondition naming the
// volume and what to do, as is a disk failing opts: its content is never
// touched.
func Examine(v *vm.RootVolume, capacity int64, opts ...Option) (Content, error) {
	var c checks
	for _, o := range opts {
		o(&c)
	}
	f, size, err := openForRead(v, capacity)
	if err != nil || f == nil {
		return Content{}, err
	}
	defer f.Close()
	head := make([]byte, min(headProbe, size))
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), head); err != nil {
		return Content{}, volumeErr(v, "read %s: %v", DiskPath(v), err)
	}
	switch {
	case allZero(head):
		return Content{Holds: Nothing}, nil
	case bytes.HasPrefix(head, qcow2Magic):
		return examineQcow2(v, f, head, size, capacity, c)
	}
	format, _, err := vmimage.CheckDisk(f, size)
	if err != nil {
		return Content{}, refused(v, "it holds data crimux cannot boot (%v): wipe it (blkdiscard, or write zeros over its first MiB) or name another volume", err)
	}
	if v.Format == vm.FormatRaw && format == vm.FormatRaw {
		return Content{Holds: Disk, VirtualSize: size}, nil
	}
	return Content{}, refused(v, "it holds data that is not a qcow2 disk: crimux does not write over it; if it is a raw disk, set %s: raw; else wipe it (blkdiscard, or write zeros over its first MiB) or name another volume",
		vm.AnnotationRootDiskFormat)
}

// Inspect is Examine of the volume at its Capacity, and that capacity.
func Inspect(v *vm.RootVolume, opts ...Option) (Content, int64, error) {
	capacity, err := Capacity(v)
	if err != nil {
		return Content{}, 0, err
	}
	content, err := Examine(v, capacity, opts...)
	return content, capacity, err
}

// openForRead opens the disk for reading and returns its size; nil, 0
// for a filesystem volume without a disk file.
func openForRead(v *vm.RootVolume, capacity int64) (*os.File, int64, error) {
	if v.Block {
		f, err := openDevice(v, os.O_RDONLY)
		return f, capacity, err
	}
	if err := checkDir(v); err != nil {
		return nil, 0, err
	}
	f, err := openDiskFile(v)
	if err != nil || f == nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if fi.Size() == 0 {
		f.Close()
		return nil, 0, nil
	}
	return f, fi.Size(), nil
}

func examineQcow2(v *vm.RootVolume, f *os.File, head []byte, size, capacity int64, c checks) (Content, error) {
	if len(head) >= qcow2CompatOffset+8 && binary.BigEndian.Uint32(head[4:]) >= 3 &&
		binary.BigEndian.Uint64(head[qcow2CompatOffset:])&importingBit != 0 {
		return Content{Holds: Unfinished}, nil
	}
	if v.Format == vm.FormatRaw {
		return Content{}, refused(v, "it holds a qcow2 disk and %s says raw: set it to qcow2 (or remove it) to boot this disk", vm.AnnotationRootDiskFormat)
	}
	format, vsize, err := vmimage.CheckDisk(f, size)
	if err == nil && format != vm.FormatQcow2 {
		err = fmt.Errorf("read as %s", format)
	}
	if err != nil {
		return Content{}, refused(v, "it holds a qcow2 disk crimux will not boot: %v; crimux does not write over it: fix or wipe it, or name another volume", err)
	}
	if vsize > capacity {
		return Content{}, refused(v, "its qcow2 disk declares %d bytes, more than the volume's %d", vsize, capacity)
	}
	// Read again through the descriptor, after CheckDisk: the header
	// checked, not the head read before it.
	var nb [4]byte
	if _, err := f.ReadAt(nb[:], qcow2SnapshotsOffset); err != nil {
		return Content{}, volumeErr(v, "read %s: %v", DiskPath(v), err)
	}
	snaps := binary.BigEndian.Uint32(nb[:])
	if c.maxSnapshots > 0 && int64(snaps) > int64(c.maxSnapshots) {
		return Content{}, refused(v, "its qcow2 disk holds %d internal snapshots, more than a VM may have (libvirt.max_snapshots_per_vm = %d), "+
			"and each would be given to the new VM's libvirt domain: with no VM running on the disk, delete the ones not needed "+
			"(qemu-img snapshot -l lists them, qemu-img snapshot -d NAME deletes one), or raise libvirt.max_snapshots_per_vm in crimux's config",
			snaps, c.maxSnapshots)
	}
	return Content{Holds: Disk, VirtualSize: vsize, Snapshots: int(snaps)}, nil
}

func refused(v *vm.RootVolume, format string, args ...any) error {
	return fmt.Errorf("root disk %s (%s): %s: %w", v.ContainerPath, DiskPath(v), fmt.Sprintf(format, args...), errdefs.ErrFailedPrecondition)
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeros = make([]byte, 64<<10)

// errNotV3 is a qcow2 whose header cannot carry the import mark.
var errNotV3 = errors.New("qcow2 header is not version 3")
