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

// GivenName is the file in a VM's directory that records whom a
// filesystem volume's disk file belonged to, and its mode, before Attach
// gave it to the VM (see givenDisk).
const GivenName = AttachName + ".given"

// Owner is the uid and gid the disk is given to (the VM's identity); nil
// leaves it root's (libvirt then gives it to its qemu user).
type Owner struct {
	UID, GID int
	// VMID says whether a uid or gid is a VM identity's: a disk found
	// owned by one (given to a VM by a crimux that did not give it back,
	// or by a migration's source node on shared storage) is root's to
	// give back, never that number's, which another pod may get next.
	VMID func(id uint32) bool
}

// A filesystem volume's disk file is the volume's own inode. It is
// reached through an idmapped bind mount (idmap.go) and never changed.
// Where there are no idmapped mounts, the bind mount is of the inode
// itself, so giving it to the VM's identity (and making it 0600) changes
// the tenant's file: VM identities are numbers of a range, each given
// again to another pod, of any namespace, once its pod is gone, and a
// disk left its VM's would be open to that later pod. So that fallback
// records the disk's owner and mode before it changes either (GivenName,
// written before the change, so that a crimux dying in between leaves
// the record), and Release gives them back, on the very inode recorded:
// through the bind mount while there is one, else (a node rebooted with
// the disk given) resolved beneath the volume's directory (tenantfs), no
// link followed, and only if it is still the inode recorded. A block
// volume needs none of this: what is given to the VM is crimux's own
// device node in the VM's directory, never the host's node.

// Attach makes the disk reachable at <vmDir>/root-volume for the VM's
// qemu alone, and returns that path: for a block volume a device node of
// the device's number (the host's node is left as it is), for a
// filesystem volume a bind mount of its disk file, taken without
// following a link, on which the file's owner reads as the VM's
// identity (or, without idmapped mounts, the file given to it, recorded
// first for Release to give back). Whatever was at the path before goes
// (released).
func Attach(v *vm.RootVolume, vmDir string, owner *Owner) (string, error) {
	p := filepath.Join(vmDir, AttachName)
	if err := Release(vmDir); err != nil {
		return "", err
	}
	var err error
	if v.Block {
		err = attachDevice(v, p)
		if err == nil && owner != nil {
			err = os.Lchown(p, owner.UID, owner.GID) // crimux's own node
		}
	} else {
		err = attachFile(v, vmDir, p, owner)
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

func attachFile(v *vm.RootVolume, vmDir, p string, owner *Owner) error {
	src, err := openDiskFile(v)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("%s: no disk", DiskPath(v))
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	if owner != nil && attachIdmapped {
		if st.Mode&0o600 != 0o600 {
			return volumeErr(v, "the disk file %s is mode %o: its owner must be able to read and write it", v.DiskFile(), st.Mode&0o7777)
		}
		err := attachMapped(src, &st, p, owner)
		if !errors.Is(err, errNoIdmap) {
			return err
		}
	}
	return giveFile(v, src, &st, vmDir, p, owner)
}

// giveFile binds the disk file src at p and gives the inode itself to
// owner, recorded first: the fallback where idmapped mounts are not
// there, and the way of a VM with no identity of its own (libvirt then
// gives the file to its qemu user).
func giveFile(v *vm.RootVolume, src *os.File, st *unix.Stat_t, vmDir, p string, owner *Owner) error {
	rec := givenDisk{Volume: v.HostPath, File: v.DiskFile(), Dev: st.Dev, Ino: st.Ino,
		UID: st.Uid, GID: st.Gid, Mode: st.Mode & 0o7777, GivenUID: st.Uid, GivenGID: st.Gid}
	if owner != nil {
		rec.GivenUID, rec.GivenGID = uint32(owner.UID), uint32(owner.GID)
		if owner.VMID != nil && (owner.VMID(rec.UID) || owner.VMID(rec.GID)) {
			rec.UID, rec.GID = 0, 0
		}
	}
	if err := writeGiven(vmDir, &rec); err != nil {
		return err
	}
	// On the descriptor, not a path: the inode changed is the one
	// recorded.
	if err := src.Chmod(0o600); err != nil { // the VM's alone, once given to it
		return err
	}
	if owner != nil {
		if err := src.Chown(owner.UID, owner.GID); err != nil {
			return err
		}
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	// The fd's magic link, not the path: the file opened is the one bound.
	return unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src.Fd()), p, "", unix.MS_BIND, "")
}

// Release undoes Attach (a VM directory without one is left as it is):
// a filesystem volume's disk file gets its owner and mode back first
// (see givenDisk), then the attachment goes. It runs before a VM's
// directory is removed: a bind mount would stop its removal. If the disk
// cannot be given back (an error on a disk still reachable), nothing is
// undone and the record stays, for the next Release to try again.
func Release(vmDir string) error {
	p := filepath.Join(vmDir, AttachName)
	rec, err := readGiven(vmDir)
	if err != nil {
		return err
	}
	if rec != nil {
		if err := giveBack(rec, p); err != nil {
			return fmt.Errorf("give the root volume's disk %s back to %d:%d: %w", filepath.Join(rec.Volume, rec.File), rec.UID, rec.GID, err)
		}
	}
	for {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err != nil {
			break // EINVAL: not (or no longer) a mount point; ENOENT: nothing
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Last: a crimux dying before this gives the disk back again, which
	// changes nothing the second time.
	if err := os.Remove(filepath.Join(vmDir, GivenName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveVMDir removes a VM's directory, a root volume's attachment in it
// first (a bind mount would stop the removal; the volume is not the VM
// directory's to remove).
func RemoveVMDir(dir string) error {
	if err := Release(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// Given says whether the VM in vmDir reaches its disk file as the file's
// owner, given to it (the fallback without idmapped mounts): only then is
// there an owner to give it again (a migration's other node, sharing the
// volume, may have given it to its own VM).
func Given(vmDir string) (bool, error) {
	rec, err := readGiven(vmDir)
	return rec != nil, err
}
