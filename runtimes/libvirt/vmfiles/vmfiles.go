// Package vmfiles is the layout of the VM runtime's files in its state
// dir: a VM pod's directory and a VM's, made with the owners and modes
// that keep qemu from planting anything crimux reads as root, the disk a
// VM boots, and its console socket, dialled without following a link.
package vmfiles

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// The files of a VM, under <state>/vms/<id>/. The directory is root's,
// 0711: qemu (the VM's own identity: vmidentity) may open what is its
// own there, but neither list nor plant anything, so crimux, which reads
// and writes in it as root, never meets a file qemu chose. Only run/ and
// cidata.iso are the VM's.
//
//	disk.qcow2      the overlay of a VM made by an older crimux (now the pod's: below)
//	console.log     the serial console, written by virtlogd (root)
//	console.offset  how far the console was copied into the CRI log
//	container.json  the copy of the VM's record (store/copies.go)
//	run/            qemu's (0700): the console socket it binds
const (
	DiskFile          = "disk.qcow2"
	ConsoleLogFile    = "console.log"
	RunDir            = "run"
	ConsoleSocketFile = "console.sock"
)

// The files of a VM pod, under <state>/pods/<sandbox id>/ (root's, 0711):
// what outlives one container of the pod.
//
//	disk.qcow2      the pod's root disk: the VM's overlay over its image's
//	                disk, with its internal snapshots (root, 0600)
//	sandbox.json    the copy of the pod's record (store/copies.go)
const PodsDir = "pods"

// QemuUser is the user libvirt runs qemu as on Debian.
const QemuUser = "libvirt-qemu"

// PodDir is the directory of VM pod sbID in the state dir stateDir.
func PodDir(stateDir, sbID string) string { return filepath.Join(stateDir, PodsDir, sbID) }

// MakePodDir makes a VM pod's directory (and <state>/pods), root's; one
// that exists is kept.
func MakePodDir(dir string) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil { // whatever the umask
			return err
		}
	}
	return nil
}

// Sandboxes look a pod's record up (a *store.Store).
type Sandboxes interface {
	Sandbox(id string) (*store.Sandbox, error)
}

// DiskPathOf is the disk VM c boots: its root volume's (attached in its
// directory), its pod's root disk (its record in pods), or, for a VM made
// by an older crimux, the disk in its own directory.
func DiskPathOf(pods Sandboxes, c *store.Container) string {
	if c.RootVolume != nil {
		return c.RootVolume.Path
	}
	if sb, err := pods.Sandbox(c.SandboxID); err == nil && sb.Disk != nil {
		return sb.Disk.Path
	}
	return filepath.Join(c.Dir, DiskFile)
}

// ConsoleSocket is where the qemu of the VM in dir listens for Attach.
func ConsoleSocket(dir string) string { return filepath.Join(dir, RunDir, ConsoleSocketFile) }

// MakeVMDir makes a VM's directory, root's, and its run/ for qemu: the
// VM's own identity's, or, for nil, libvirt's shared qemu user's.
func MakeVMDir(dir string, id *store.VMIdentity) error {
	if err := os.Mkdir(dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // whatever the umask
		return err
	}
	run := filepath.Join(dir, RunDir)
	if err := os.Mkdir(run, 0o700); err != nil {
		return err
	}
	if id != nil {
		return vmidentity.GiveTo(id, run)
	}
	uid, gid, err := qemuIDs()
	if err != nil {
		return err
	}
	return os.Lchown(run, uid, gid)
}

// qemuIDs are the uid and gid libvirt runs qemu as; root's where there is
// no such user (a host where libvirt runs qemu as root).
func qemuIDs() (uid, gid int, err error) {
	u, err := user.Lookup(QemuUser)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("look up %s: %w", QemuUser, err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return 0, 0, err
	}
	gid, err = strconv.Atoi(u.Gid)
	return uid, gid, err
}

// DialConsole connects to the console socket of the VM in dir. run/ is
// qemu's to write: the socket is opened without following a symlink and
// must be a socket, then reached through its descriptor, so a qemu that
// planted a link to another socket (containerd's, another VM's) cannot
// have root connect there. A VM made before run/ existed has its socket
// in dir itself.
func DialConsole(ctx context.Context, dir string) (net.Conn, error) {
	path := ConsoleSocket(dir)
	if _, err := os.Lstat(filepath.Join(dir, RunDir)); errors.Is(err, os.ErrNotExist) {
		path = filepath.Join(dir, ConsoleSocketFile)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket (mode %#o)", path, st.Mode)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
