// Package virtiofs runs the virtiofsd that serves one shared directory of
// a VM (a pod's mount, as a virtio-fs share: converter/vm.Share).
//
// crimux starts virtiofsd itself, once per share for every qemu process
// of the VM (the placement of that qemu asks for it), rather than having
// libvirt do it, so that:
//
//   - it runs in the VM's cgroup from its first instruction: it is started
//     as a small helper (crimux's own binary, subcommand HelperCommand)
//     that waits on a pipe until crimux placed it, and only then execs
//     virtiofsd;
//   - a read-only mount is read-only: Debian 12's virtiofsd (the C one of
//     qemu 7.2) has no read-only option, so the helper makes itself a
//     mount namespace (slave to the host's: host-side changes, such as a
//     ConfigMap update, still show) and binds the directory read-only onto
//     itself there, where virtiofsd's own sandbox (pivot_root into the
//     directory) inherits it; nothing is mounted in the host's namespace,
//     so nothing can leak;
//   - qemu never opens a path: crimux makes the vhost-user socket, connects
//     to it itself, unlinks it, and hands qemu the connected end (package
//     placement); virtiofsd gets the listening end with the one pending
//     connection.
//
// The guest gets on a share what the container's security context gives
// a container (converter/vm.ShareRights), because virtiofsd, root, acts
// for every guest user:
//
//   - a container that runs as a user other than root gets a virtiofsd in
//     a user namespace whose root is that user (the helper stays as its
//     parent: Go can make a user namespace only for a child). Capabilities
//     alone cannot do this: root with none left still owns root's files,
//     so a guest's chmod u+s on a file it chowned to root gives a
//     setuid-root file (measured: chmod u+s by uid 0 with CapEff 0
//     succeeds; mknod fails). In the namespace host root is unmapped: no
//     setuid-root file, no chown to root, no device node (CAP_MKNOD counts
//     only in the host's namespace), and files are that user's. A seccomp
//     filter makes virtiofsd's switches to the guest caller's IDs no-ops
//     (squash.go), so every guest user acts as that one user, as every
//     process of the container does;
//   - a root container gives virtiofsd (modcaps) only the capabilities it
//     holds itself, squashed to root when it may not change IDs.
//
// virtiofsd exits when its qemu closes the connection (qemu exits, or the
// answer carrying it was never delivered), so a share needs no teardown.
package virtiofs

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/crimux/crimux/converter/vm"
)

// DefaultBinary is Debian's virtiofsd (package qemu-system-common).
const DefaultBinary = "/usr/lib/qemu/virtiofsd"

// HelperCommand is the crimux subcommand that waits for its placement,
// sets up the mount namespace and execs virtiofsd (Helper).
const HelperCommand = "virtiofsd-sandbox"

// placeTimeout bounds how long the helper waits for crimux to place it.
const placeTimeout = 30 * time.Second

// Daemons starts virtiofsd processes.
type Daemons struct {
	// Binary is virtiofsd; "" is DefaultBinary.
	Binary string
	// Helper is the crimux executable run with HelperCommand; "" is this
	// process's own executable.
	Helper string
	Log    *slog.Logger
}

// Start starts the virtiofsd of share sh, its socket made in a private
// directory under dir, placed by place (into the VM's cgroup) before it
// runs, and returns qemu's end of its vhost-user connection.
func (d *Daemons) Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error) {
	listener, client, err := connectedPair(dir)
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", sh.ContainerPath, err)
	}
	defer listener.Close()
	cmd, gate, err := d.helper(sh, listener)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("share %s: %w", sh.ContainerPath, err)
	}
	if err := d.release(cmd, gate, place); err != nil {
		client.Close()
		return nil, fmt.Errorf("share %s: %w", sh.ContainerPath, err)
	}
	go d.reap(cmd, sh)
	return client, nil
}

// connectedPair makes a listening unix socket in a fresh 0700 directory
// under dir, connects to it, and removes the directory: only the two
// ends remain, reachable by nobody else.
func connectedPair(dir string) (listener, client *os.File, err error) {
	tmp, err := os.MkdirTemp(dir, ".fs-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(tmp, "s"), Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(tmp, "s"), Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if listener, err = l.File(); err != nil {
		return nil, nil, err
	}
	if client, err = c.File(); err != nil {
		listener.Close()
		return nil, nil, err
	}
	return listener, client, nil
}

// helper starts the helper process, held at its gate: it gets the
// listening socket as fd 3 and the gate's read end as fd 4.
func (d *Daemons) helper(sh vm.Share, listener *os.File) (*exec.Cmd, *os.File, error) {
	self := d.Helper
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	bin := d.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer gateR.Close()
	cmd := exec.Command(self, HelperArgs(sh, bin)...)
	cmd.ExtraFiles = []*os.File{listener, gateR}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		gateW.Close()
		return nil, nil, fmt.Errorf("start virtiofsd helper: %w", err)
	}
	return cmd, gateW, nil
}

// release places the helper, then opens its gate; a helper that cannot
// be placed is killed before it runs anything.
func (d *Daemons) release(cmd *exec.Cmd, gate *os.File, place func(pid int) error) error {
	defer gate.Close()
	if err := place(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("place virtiofsd: %w", err)
	}
	if _, err := gate.Write([]byte(gateOpen)); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("release virtiofsd: %w", err)
	}
	return nil
}

func (d *Daemons) reap(cmd *exec.Cmd, sh vm.Share) {
	err := cmd.Wait()
	if d.Log != nil {
		d.Log.Debug("virtiofsd exited", "share", sh.ContainerPath, "tag", sh.Tag, "pid", cmd.Process.Pid, "err", err)
	}
}

// gateOpen is what the helper waits for.
const gateOpen = "go\n"

// HelperArgs is the helper's command line for share sh: the subcommand,
// the directory, ro or rw, what the share acts as (sh.Rights), then
// virtiofsd's own command line, without the capabilities the container
// was not given.
func HelperArgs(sh vm.Share, virtiofsd string) []string {
	mode := "rw"
	if sh.ReadOnly {
		mode = "ro"
	}
	args := []string{HelperCommand, sh.HostPath, mode}
	source := sh.HostPath
	if u := sh.Rights.User; u != nil {
		args = append(args, "--user", formatUser(u))
		source = UserViewPath(sh.HostPath)
	}
	if sh.Rights.Squash {
		args = append(args, "--squash")
	}
	opts := "source=" + source + ",cache=auto,sandbox=namespace,no_posix_lock,no_flock,no_xattr,log_level=warn"
	if len(sh.Rights.Drop) > 0 {
		opts += ",modcaps=-" + strings.Join(sh.Rights.Drop, ":-")
	}
	args = append(args, "--", virtiofsd, "--fd=3", "-o", opts, "--thread-pool-size=4")
	if sh.Rights.User != nil {
		// Set by the helper: virtiofsd cannot raise it in its namespace.
		args = append(args, "--rlimit-nofile=0")
	}
	return args
}
