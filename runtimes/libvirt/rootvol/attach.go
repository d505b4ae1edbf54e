package rootvol

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
)

// AttachName is the file in a VM's directory through which its qemu
// reaches a root volume's disk.
const AttachName = vm.RootVolumeFile

// Owner is the uid and gid the disk is given to (the VM's identity); nil
// leaves it root's (libvirt then gives it to its qemu user).
type Owner struct{ UID, GID int }

// Attach makes the disk reachable at <vmDir>/root-volume for the VM's
// qemu alone, and returns that path: for a block volume a device node of
// the device's number (the host's node is left as it is), for a
// filesystem volume a bind mount of its disk file, taken without
// following a link. Whatever was at the path before goes.
func Attach(v *vm.RootVolume, vmDir string, owner *Owner) (string, error) {
	p := filepath.Join(vmDir, AttachName)
	if err := Release(vmDir); err != nil {
		return "", err
	}
	var err error
	if v.Block {
		err = attachDevice(v, p)
	} else {
		err = attachFile(v, p)
	}
	if err == nil && owner != nil {
		err = os.Lchown(p, owner.UID, owner.GID)
	}
	if err != nil {
		_ = Release(vmDir)
		return "", fmt.Errorf("root disk %s: give it to the VM: %w", v.ContainerPath, err)
	}
	return p, nil
}

func attachDevice(v *vm.RootVolume, p string) error {
	var st unix.Stat_t
	if err := unix.Stat(v.HostPath, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("%s is not a block device", v.HostPath)
	}
	return unix.Mknod(p, unix.S_IFBLK|0o600, int(st.Rdev))
}

func attachFile(v *vm.RootVolume, p string) error {
	src, err := openDiskFile(v)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("%s: no disk", DiskPath(v))
	}
	defer src.Close()
	if err := src.Chmod(0o600); err != nil { // the VM's alone, once given to it
		return err
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	// The fd's magic link, not the path: the file opened is the one bound.
	return unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src.Fd()), p, "", unix.MS_BIND, "")
}

// Release undoes Attach (a VM directory without one is left as it is).
// It runs before a VM's directory is removed: a bind mount would stop
// its removal.
func Release(vmDir string) error {
	p := filepath.Join(vmDir, AttachName)
	for {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err != nil {
			break // EINVAL: not (or no longer) a mount point; ENOENT: nothing
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
