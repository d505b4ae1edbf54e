package rootvol

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/tenantfs"
)

// Source is the image's disk an empty volume gets.
type Source struct {
	Path, Format string
	VirtualSize  int64
}

// qemuImg is the qemu-img binary (tests may change it).
var qemuImg = "qemu-img"

// DiskSize is the size of the disk an import gives the guest: the size
// the pod names, else the volume's (less room for a qcow2's tables:
// Reserve). It is refused when the image's disk does not fit it or it
// does not fit the volume; whole MiB.
func DiskSize(v *vm.RootVolume, capacity int64, src Source) (int64, error) {
	room := capacity
	if v.Format == vm.FormatQcow2 {
		room = capacity - Reserve(capacity)
	}
	room = max(room, 0)
	size := room &^ (1<<20 - 1)
	if v.Size > 0 {
		if v.Size > room {
			return 0, errdefs.Invalid("annotations["+vm.AnnotationRootDiskSize+"]", "root disk %s: %d bytes do not fit the volume (%d bytes, of which %d hold the disk)",
				v.ContainerPath, v.Size, capacity, room)
		}
		size = v.Size
	}
	if src.VirtualSize > size {
		return 0, errdefs.Invalid(v.Field, "root disk %s (%s): the volume's %d bytes (a disk of %d) are fewer than the image's disk needs (%d bytes): give the claim more room",
			v.ContainerPath, v.HostPath, capacity, size, src.VirtualSize)
	}
	return size, nil
}

// Reserve is the room a qcow2 keeps on its volume for its own tables
// (refcounts, L1 and L2 tables: about 0.02% of the disk) and headroom:
// 1% and 16 MiB. Snapshots need more: name a smaller disk
// (crimux.io/root-disk-size) to keep room for them.
func Reserve(capacity int64) int64 { return capacity/100 + 16<<20 }

// Import writes src into the volume as a disk of size bytes, reporting
// its progress (per cent) as qemu-img does. On error the volume holds
// nothing crimux would boot (an unfinished import, done again next time).
func Import(ctx context.Context, v *vm.RootVolume, src Source, size int64, progress func(pct float64)) error {
	if v.Format == vm.FormatRaw {
		return importRaw(ctx, v, src, size, progress)
	}
	return importQcow2(ctx, v, src, size, progress)
}

// Every write to the volume goes through one descriptor: the block
// device opened once, or the disk file opened (or created) beneath the
// volume's directory without following a link (tenantfs). The volume is
// the tenant's to write, from this pod and any other sharing it: a path
// into it looked up a second time may have become a link to a host file
// that crimux, as root, would write. qemu-img is handed the descriptor
// (/dev/fd/3, the same open inode), never the path.

// afterRemove, when set (tests), runs after a re-import has unlinked the
// old disk file and before it creates the new one: where a tenant would
// plant a link.
var afterRemove func()

func importQcow2(ctx context.Context, v *vm.RootVolume, src Source, size int64, progress func(float64)) error {
	var f *os.File
	var err error
	if v.Block {
		f, err = openDevice(v, os.O_RDWR)
	} else {
		f, err = recreateDiskFile(v)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	extra, paths := tenantfs.ChildFiles(f)
	dst := paths[0]
	if err := run(ctx, nil, extra, qemuImg, "create", "-q", "-f", "qcow2", "-o", "compat=1.1,cluster_size=65536", dst, strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("root disk %s: create the qcow2 on %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	if err := setImportMark(f, true); err != nil {
		return fmt.Errorf("root disk %s: %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	if err := run(ctx, progress, extra, qemuImg, "convert", "-p", "-n", "-f", src.Format, "-O", "qcow2", src.Path, dst); err != nil {
		return fmt.Errorf("root disk %s: import the image's disk into %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	if err := setImportMark(f, false); err != nil {
		return fmt.Errorf("root disk %s: %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	return nil
}

// recreateDiskFile removes a filesystem volume's disk file (an import
// cut short) and creates it anew, empty: unlinked by name relative to
// the volume's directory (a link there is removed, not followed), then
// created O_EXCL (a name the tenant took in between is refused).
func recreateDiskFile(v *vm.RootVolume) (*os.File, error) {
	root, err := tenantfs.OpenRoot(v.HostPath)
	if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	defer root.Close()
	if err := root.Remove(v.DiskFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, volumeErr(v, "remove the unfinished import: %v", err)
	}
	if afterRemove != nil {
		afterRemove()
	}
	f, err := root.Create(v.DiskFile())
	if errors.Is(err, fs.ErrExist) {
		return nil, volumeErr(v, "%v: something else made %s while crimux was importing into it (another pod on the volume?); nothing was written through it", err, v.DiskFile())
	} else if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	return f, nil
}

// openRawDiskFile opens a filesystem volume's raw disk file for writing,
// or creates it, beneath the volume's directory without following a
// link.
func openRawDiskFile(v *vm.RootVolume) (*os.File, error) {
	root, err := tenantfs.OpenRoot(v.HostPath)
	if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	defer root.Close()
	f, err := root.Open(v.DiskFile(), os.O_RDWR)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = root.Create(v.DiskFile())
	}
	if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	return f, nil
}

// importRaw copies all but the first MiB, then the first MiB (Source
// and target both read through qemu's raw driver at an offset).
func importRaw(ctx context.Context, v *vm.RootVolume, src Source, size int64, progress func(float64)) error {
	var f *os.File
	var err error
	proto := "host_device"
	if v.Block {
		f, err = openDevice(v, os.O_RDWR)
	} else {
		proto = "file"
		f, err = openRawDiskFile(v)
		if err == nil {
			// Emptied, then sized: what the import does not write reads
			// as zeros.
			if err = f.Truncate(0); err == nil {
				err = f.Truncate(size)
			}
			if err != nil {
				f.Close()
				err = fmt.Errorf("root disk %s: %s: %w", v.ContainerPath, DiskPath(v), err)
			}
		}
	}
	if err != nil {
		return err
	}
	defer f.Close()
	extra, paths := tenantfs.ChildFiles(f)
	dst := paths[0]
	const head = 1 << 20
	if src.VirtualSize <= head {
		if err := run(ctx, progress, extra, qemuImg, "convert", "-p", "-n", "-f", src.Format, "-O", "raw", src.Path, dst); err != nil {
			return fmt.Errorf("root disk %s: import the image's disk into %s: %w", v.ContainerPath, DiskPath(v), err)
		}
		return nil
	}
	part := func(off, n int64) []string {
		return []string{"--image-opts", fmt.Sprintf("driver=raw,offset=%d,size=%d,file.driver=%s,file.file.driver=file,file.file.filename=%s", off, n, src.Format, optEscape(src.Path)),
			"--target-image-opts", fmt.Sprintf("driver=raw,offset=%d,size=%d,file.driver=%s,file.filename=%s", off, n, proto, optEscape(dst))}
	}
	rest := append([]string{"convert", "-p", "-n"}, part(head, src.VirtualSize-head)...)
	if err := run(ctx, progress, extra, qemuImg, rest...); err != nil {
		return fmt.Errorf("root disk %s: import the image's disk into %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	first := append([]string{"convert", "-n"}, part(0, head)...)
	if err := run(ctx, nil, extra, qemuImg, first...); err != nil {
		return fmt.Errorf("root disk %s: import the image's disk's first MiB into %s: %w", v.ContainerPath, DiskPath(v), err)
	}
	return nil
}

// optEscape escapes a value for qemu's key=value options (a comma is
// written twice).
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// setImportMark sets or clears crimux's import mark in the qcow2 v3
// header of the disk f holds, and syncs it.
func setImportMark(f *os.File, on bool) error {
	var b [8]byte
	if _, err := f.ReadAt(b[:4], 4); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(b[:4]) < 3 {
		return errNotV3
	}
	if _, err := f.ReadAt(b[:], qcow2CompatOffset); err != nil {
		return err
	}
	bits := binary.BigEndian.Uint64(b[:])
	if on {
		bits |= importingBit
	} else {
		bits &^= importingBit
	}
	binary.BigEndian.PutUint64(b[:], bits)
	if _, err := f.WriteAt(b[:], qcow2CompatOffset); err != nil {
		return err
	}
	return f.Sync()
}

// run runs a command, handing progress the per cents qemu-img -p prints;
// extra are its ExtraFiles (tenantfs.ChildFiles).
func run(ctx context.Context, progress func(float64), extra []*os.File, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.ExtraFiles = extra
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	s := bufio.NewScanner(out)
	s.Split(splitProgress)
	for s.Scan() {
		if pct, ok := parseProgress(s.Text()); ok && progress != nil {
			progress(pct)
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// splitProgress splits qemu-img's progress output at \r or \n.
func splitProgress(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// parseProgress reads "    (12.34/100%)".
func parseProgress(line string) (float64, bool) {
	line = strings.TrimSpace(line)
	num, ok := strings.CutPrefix(line, "(")
	if !ok {
		return 0, false
	}
	num, _, ok = strings.Cut(num, "/100%)")
	if !ok {
		return 0, false
	}
	pct, err := strconv.ParseFloat(num, 64)
	return pct, err == nil
}
