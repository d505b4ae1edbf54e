package rootvol

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
)

// vmUID is the VM identity the tests give a volume's disk to: pod A's,
// and pod B's once A's is free again.
const vmUID = 4242

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount, chown)")
	}
}

// volumeWithDisk is a filesystem volume whose disk file is root's with
// mode perm.
func volumeWithDisk(t *testing.T, perm os.FileMode) *vm.RootVolume {
	t.Helper()
	v := fsVolume(t, vm.FormatQcow2)
	reachable(t, v.HostPath)
	if err := os.WriteFile(DiskPath(v), []byte("disk"), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(DiskPath(v), perm); err != nil { // less no umask
		t.Fatal(err)
	}
	if err := os.Chown(DiskPath(v), 0, 0); err != nil {
		t.Fatal(err)
	}
	return v
}

// reachable makes dir and its parent (t.TempDir's, root's 0700)
// traversable by anyone, as kubelet's volume directories and crimux's VM
// directories are to the qemu that reaches into them: a refusal is then
// the file's own.
func reachable(t *testing.T, dir string) string {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// vmDirOf is a VM directory, its attachment released at the end.
func vmDirOf(t *testing.T) string {
	t.Helper()
	dir := reachable(t, t.TempDir())
	t.Cleanup(func() { _ = Release(dir) })
	return dir
}

func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// openAs opens path with flag on a thread of its own whose uids and gids
// are all uid, with no supplementary group: what a qemu of that identity
// could open. That thread is never given back to the Go runtime: it ends
// with its goroutine, and its credentials with it.
func openAs(t *testing.T, uid int, path string, flag int) error {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		// Raw syscalls change this thread alone; syscall.Setresuid and
		// friends would change every thread of the process.
		if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
			done <- errors.Join(errors.New("setgroups"), errno)
			return
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
			done <- errors.Join(errors.New("setresgid"), errno)
			return
		}
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
			done <- errors.Join(errors.New("setresuid"), errno)
			return
		}
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err == nil {
			unix.Close(fd)
		}
		done <- err
	}()
	return <-done
}

// mustNotOpen: a process of identity uid opens path neither for reading
// nor for writing.
func mustNotOpen(t *testing.T, uid int, path string) {
	t.Helper()
	for _, flag := range []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR} {
		if err := openAs(t, uid, path, flag); !errors.Is(err, unix.EACCES) {
			t.Errorf("uid %d opens %s (flags %#x): %v, want EACCES", uid, path, flag, err)
		}
	}
}

// withoutIdmap makes Attach take the fallback of a filesystem without
// idmapped mounts for the rest of t.
func withoutIdmap(t *testing.T) {
	t.Helper()
	attachIdmapped = false
	t.Cleanup(func() { attachIdmapped = true })
}

// TestAttachLeavesTheVolumesDisk: the VM reaches a filesystem volume's
// disk file through an idmapped mount, as its owner; the inode, the
// tenant's, keeps its owner and mode while the VM runs and after.
// Another VM identity opens neither the attachment nor the disk, and
// nothing is recorded to give back.
func TestAttachLeavesTheVolumesDisk(t *testing.T) {
	needRoot(t)
	for _, perm := range []os.FileMode{0o600, 0o640, 0o644} {
		t.Run(perm.String(), func(t *testing.T) {
			v := volumeWithDisk(t, perm)
			disk := DiskPath(v)
			vmDir := vmDirOf(t)
			p, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID})
			if err != nil {
				t.Fatal(err)
			}
			if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 || os.FileMode(st.Mode&0o7777) != perm {
				t.Fatalf("attached, the volume's disk is %d:%d %o, want 0:0 %o", st.Uid, st.Gid, st.Mode&0o7777, perm)
			}
			if st := statOf(t, p); st.Uid != vmUID || st.Gid != vmUID {
				t.Errorf("the attachment reads as %d:%d's, want the VM's %d", st.Uid, st.Gid, vmUID)
			}
			if err := openAs(t, vmUID, p, unix.O_RDWR); err != nil {
				t.Errorf("the VM's qemu cannot open its attached disk: %v", err)
			}
			if given, err := Given(vmDir); given || err != nil {
				t.Errorf("Given = %v, %v: want nothing recorded", given, err)
			}
			if perm&0o006 == 0 {
				mustNotOpen(t, vmUID+1, p)
			}
			if perm&0o004 == 0 {
				mustNotOpen(t, vmUID, disk)
			}
			if err := Release(vmDir); err != nil {
				t.Fatal(err)
			}
			if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 || os.FileMode(st.Mode&0o7777) != perm {
				t.Errorf("released, the volume's disk is %d:%d %o, want 0:0 %o", st.Uid, st.Gid, st.Mode&0o7777, perm)
			}
			if err := os.Remove(vmDir); err != nil {
				t.Fatalf("the VM dir after Release: %v", err)
			}
		})
	}
}

// A disk file its owner cannot write is refused, naming the volume.
func TestAttachRefusesAnUnwritableDisk(t *testing.T) {
	needRoot(t)
	v := volumeWithDisk(t, 0o444)
	vmDir := vmDirOf(t)
	_, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID})
	if err == nil || !strings.Contains(err.Error(), "mode 444") || !strings.Contains(err.Error(), v.Field+".host_path") {
		t.Fatalf("Attach of a 0444 disk: %v, want a refusal naming the mode and the field", err)
	}
	if entries, err := os.ReadDir(vmDir); err != nil || len(entries) != 0 {
		t.Fatalf("the VM dir after a refusal: %v, %v", entries, err)
	}
}

// TestReleaseGivesTheDiskBack (the fallback without idmapped mounts):
// Attach gives a filesystem volume's disk
// file, the volume's own inode, to the VM's identity; Release gives it
// back to its owner with its mode, so that a later pod given the same
// uid cannot open a disk that was another pod's.
func TestReleaseGivesTheDiskBack(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	for _, perm := range []os.FileMode{0o600, 0o640, 0o644} {
		t.Run(perm.String(), func(t *testing.T) {
			v := volumeWithDisk(t, perm)
			disk := DiskPath(v)
			vmDir := vmDirOf(t)
			p, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID})
			if err != nil {
				t.Fatal(err)
			}
			if st := statOf(t, disk); st.Uid != vmUID || st.Gid != vmUID || st.Mode&0o7777 != 0o600 {
				t.Fatalf("attached, the volume's disk is %d:%d %o, want %d:%d 600", st.Uid, st.Gid, st.Mode&0o7777, vmUID, vmUID)
			}
			if err := openAs(t, vmUID, p, unix.O_RDWR); err != nil {
				t.Errorf("pod A's qemu cannot open its attached disk: %v", err)
			}
			if err := Release(vmDir); err != nil {
				t.Fatal(err)
			}
			if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 || os.FileMode(st.Mode&0o7777) != perm {
				t.Errorf("released, the volume's disk is %d:%d %o, want 0:0 %o", st.Uid, st.Gid, st.Mode&0o7777, perm)
			}
			// Pod B, given pod A's uid once A's record is gone, in any
			// namespace, with the volume's directory reachable.
			if perm&0o004 == 0 {
				mustNotOpen(t, vmUID, disk)
			}
			if err := os.Remove(vmDir); err != nil {
				t.Fatalf("the VM dir after Release: %v", err)
			}
		})
	}
}

// TestReleaseAfterACrash: crimux died with the disk given to the VM and
// the node rebooted (the bind mount is gone); the record Attach left in
// the VM's directory lets Release (the collector's removal of the
// directory) give the disk back, resolving it beneath the volume's
// directory, the inode recorded and no other.
func TestReleaseAfterACrash(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	v := volumeWithDisk(t, 0o640)
	disk := DiskPath(v)
	vmDir := vmDirOf(t)
	p, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil { // the reboot
		t.Fatal(err)
	}
	if err := Release(vmDir); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o640 {
		t.Errorf("released after a crash, the volume's disk is %d:%d %o, want 0:0 640", st.Uid, st.Gid, st.Mode&0o7777)
	}
	mustNotOpen(t, vmUID, disk)
	if err := os.Remove(vmDir); err != nil {
		t.Fatalf("the VM dir after Release: %v", err)
	}
}

// TestReleaseAfterACrashFollowsNoLink: after the crash the tenant put a
// link to a host file at the disk's name; Release changes neither the
// link's target nor the link, and still empties the VM's directory.
func TestReleaseAfterACrashFollowsNoLink(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	v := volumeWithDisk(t, 0o644)
	disk := DiskPath(v)
	vmDir := vmDirOf(t)
	p, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	// The host file: the VM's identity's (as the disk was), that Release
	// must not make root's.
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(host, vmUID, vmUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(disk, disk+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, disk); err != nil {
		t.Fatal(err)
	}
	if err := Release(vmDir); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, host); st.Uid != vmUID || st.Mode&0o7777 != 0o600 {
		t.Fatalf("Release changed the host file a link named: %d:%d %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if entries, err := os.ReadDir(vmDir); err != nil || len(entries) != 0 {
		t.Fatalf("the VM dir after Release: %v, %v", entries, err)
	}
}

// TestReattachKeepsTheOriginalOwner: Attach again over an attachment (a
// VM made again in the same directory) records the disk's owner before
// the first Attach, not the VM's.
func TestReattachKeepsTheOriginalOwner(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	v := volumeWithDisk(t, 0o644)
	vmDir := vmDirOf(t)
	for range 2 {
		if _, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Release(vmDir); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, DiskPath(v)); st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o644 {
		t.Fatalf("released, the volume's disk is %d:%d %o, want 0:0 644", st.Uid, st.Gid, st.Mode&0o7777)
	}
}

// TestReleaseThroughTheMount: the disk is given back through the bind
// mount, the very inode, whatever its name in the volume is now (the
// tenant renamed it, and put another file at its name, which Release
// leaves as it is).
func TestReleaseThroughTheMount(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	v := volumeWithDisk(t, 0o640)
	disk := DiskPath(v)
	vmDir := vmDirOf(t)
	if _, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID}); err != nil {
		t.Fatal(err)
	}
	moved := disk + ".moved"
	if err := os.Rename(disk, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(disk, []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(disk, vmUID, vmUID); err != nil {
		t.Fatal(err)
	}
	if err := Release(vmDir); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, moved); st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o640 {
		t.Errorf("released, the disk (renamed) is %d:%d %o, want 0:0 640", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if st := statOf(t, disk); st.Uid != vmUID || st.Mode&0o7777 != 0o600 {
		t.Errorf("Release changed the file now at the disk's name: %d:%d %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
}

// A disk found owned by a VM identity (left so by a crimux that did not
// give it back, or by a migration's source node on shared storage) is
// given back to root, never to that identity, which another pod may get:
// by the fallback at Release, and at once by an idmapped Attach.
func TestReleaseNeverGivesToAVMIdentity(t *testing.T) {
	withoutIdmap(t)
	needRoot(t)
	v := volumeWithDisk(t, 0o600)
	disk := DiskPath(v)
	const earlier = vmUID + 7
	if err := os.Chown(disk, earlier, earlier); err != nil {
		t.Fatal(err)
	}
	vmDir := vmDirOf(t)
	isVM := func(id uint32) bool { return id >= vmUID && id < vmUID+100 }
	if _, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID, VMID: isVM}); err != nil {
		t.Fatal(err)
	}
	if err := Release(vmDir); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("released, the disk found owned by VM identity %d is %d:%d, want 0:0", earlier, st.Uid, st.Gid)
	}
	mustNotOpen(t, earlier, disk)
}

func TestAttachTakesADiskBackFromAVMIdentity(t *testing.T) {
	needRoot(t)
	v := volumeWithDisk(t, 0o600)
	disk := DiskPath(v)
	const earlier = vmUID + 7
	if err := os.Chown(disk, earlier, earlier); err != nil {
		t.Fatal(err)
	}
	vmDir := vmDirOf(t)
	isVM := func(id uint32) bool { return id >= vmUID && id < vmUID+100 }
	p, err := Attach(v, vmDir, &Owner{UID: vmUID, GID: vmUID, VMID: isVM})
	if err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, disk); st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("attached, the disk found owned by VM identity %d is %d:%d, want 0:0", earlier, st.Uid, st.Gid)
	}
	if err := openAs(t, vmUID, p, unix.O_RDWR); err != nil {
		t.Errorf("the VM's qemu cannot open its attached disk: %v", err)
	}
	mustNotOpen(t, earlier, disk)
}
