package rootvol

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/tenantfs"
)

// Capacity is how many bytes the volume holds: the block device's size,
// or the size of the filesystem the directory is on.
func Capacity(v *vm.RootVolume) (int64, error) {
	if v.Block {
		f, err := openDevice(v, os.O_RDONLY)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return deviceSize(f, v)
	}
	if err := checkDir(v); err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.HostPath, &st); err != nil {
		return 0, volumeErr(v, "statfs: %v", err)
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// Key identifies the volume on this node however its path reads: the
// block device's number, or the directory's device and inode.
func Key(v *vm.RootVolume) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(v.HostPath, &st); err != nil {
		return "", volumeErr(v, "%v", err)
	}
	if v.Block {
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return "", errdefs.Invalid(v.Field+".host_path", "root disk %s: %s is not a block device", v.ContainerPath, v.HostPath)
		}
		return fmt.Sprintf("block:%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
	}
	return fmt.Sprintf("dir:%d:%d", st.Dev, st.Ino), nil
}

// DiskPath is where the disk is on the host: the device, or the file in
// the directory.
func DiskPath(v *vm.RootVolume) string {
	if v.Block {
		return v.HostPath
	}
	return filepath.Join(v.HostPath, v.DiskFile())
}

func openDevice(v *vm.RootVolume, flag int) (*os.File, error) {
	f, err := os.OpenFile(v.HostPath, flag|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, volumeErr(v, "%v", errors.Unwrap(err))
	}
	fi, err := f.Stat()
	if err == nil && (fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0) {
		err = fmt.Errorf("%s is not a block device (%s)", v.HostPath, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, errdefs.Invalid(v.Field+".host_path", "root disk %s: %v", v.ContainerPath, err)
	}
	return f, nil
}

func deviceSize(f *os.File, v *vm.RootVolume) (int64, error) {
	var n uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0, volumeErr(v, "size of %s: %v", v.HostPath, errno)
	}
	return int64(n), nil
}

func checkDir(v *vm.RootVolume) error {
	fi, err := os.Stat(v.HostPath)
	if err != nil {
		return volumeErr(v, "%v", errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return errdefs.Invalid(v.Field+".host_path", "root disk %s: %s is not a directory", v.ContainerPath, v.HostPath)
	}
	return nil
}

// openDiskFile opens a filesystem volume's disk file for reading, by a
// descriptor of the volume's directory (tenantfs): the volume is the
// tenant's to write, so a link at the disk's name (which could name any
// host file) is not followed, and anything but a regular file there (a
// FIFO, a device node, a directory) is refused without being opened: a
// FIFO is not waited on, a device's driver never sees an open. nil, nil
// when there is no disk file yet.
func openDiskFile(v *vm.RootVolume) (*os.File, error) {
	root, err := tenantfs.OpenRoot(v.HostPath)
	if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	defer root.Close()
	f, err := root.Open(v.DiskFile(), os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, volumeErr(v, "%v", err)
	}
	return f, nil
}

// volumeErr is an error about the volume's host side.
func volumeErr(v *vm.RootVolume, format string, args ...any) error {
	return errdefs.Invalid(v.Field+".host_path", "root disk %s (%s): %s", v.ContainerPath, v.HostPath, fmt.Sprintf(format, args...))
}
