package rootvol

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// A filesystem volume's disk file is the tenant's own inode. Its VM's
// qemu runs as the VM's identity, a number given again to another pod
// once this one is gone, so the inode is never given to it: the VM
// reaches the disk through an idmapped bind mount in its own directory,
// on which the file's owner reads as the VM's identity. The inode's
// owner and mode stay as the tenant left them, on the volume and on
// every other node sharing it, and nothing is to give back at release.
// A filesystem without idmapped mounts (NFS; kernels before 5.12) falls
// back to giving the inode, recorded and given back (givenDisk).

// errNoIdmap says the kernel or the volume's filesystem has no idmapped
// mounts.
var errNoIdmap = errors.New("no idmapped mounts")

// attachIdmapped is false only in tests of the fallback.
var attachIdmapped = true

// attachMapped binds the disk file src (st its Fstat) at p through a
// mount on which its owner reads as owner's identity. The file's mode
// must let its owner read and write it.
func attachMapped(src *os.File, st *unix.Stat_t, p string, owner *Owner) error {
	if err := reclaim(src, st, owner); err != nil {
		return err
	}
	ns, err := mappingNamespace(st.Uid, uint32(owner.UID), st.Gid, uint32(owner.GID))
	if err != nil {
		return err
	}
	defer ns.Close()
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return noIdmap("open_tree", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return noIdmap("mount_setattr", err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	if err := unix.MoveMount(tree, "", -1, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", p, err)
	}
	return nil
}

// reclaim makes a disk found owned by a VM identity root's: an older
// crimux gave it so and did not give it back, and a later pod may be
// given that number. It is the one change made to the inode.
func reclaim(src *os.File, st *unix.Stat_t, owner *Owner) error {
	if owner.VMID == nil || (!owner.VMID(st.Uid) && !owner.VMID(st.Gid)) {
		return nil
	}
	if err := src.Chown(0, 0); err != nil {
		return fmt.Errorf("take the disk back from VM identity %d:%d: %w", st.Uid, st.Gid, err)
	}
	st.Uid, st.Gid = 0, 0
	return nil
}

// noIdmap wraps the error of a mount call: errNoIdmap where the kernel
// or the filesystem does not do idmapped mounts.
func noIdmap(call string, err error) error {
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: %w: %w", call, errNoIdmap, err)
	}
	return fmt.Errorf("%s: %w", call, err)
}

// mappingNamespace is a user namespace in which uid and gid are toUID
// and toGID outside: the mapping of an idmapped mount. It is held by a
// child that stops at its execve (traced) and never runs; the
// descriptor holds the namespace once the child is gone. The child is
// not reaped before its namespace is opened, so its pid names it alone.
func mappingNamespace(uid, toUID, gid, toGID uint32) (*os.File, error) {
	runtime.LockOSThread() // the parent death signal is the thread's
	defer runtime.UnlockOSThread()
	proc, err := os.StartProcess("/proc/self/exe", []string{"crimux-idmap"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(toUID), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(toGID), Size: 1}},
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}})
	if err != nil {
		return nil, noIdmap("a user namespace for the disk's mapping", err)
	}
	defer func() {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid))
	if err != nil {
		return nil, fmt.Errorf("the disk mapping's user namespace: %w", err)
	}
	return ns, nil
}
