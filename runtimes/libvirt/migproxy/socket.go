package migproxy

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// crimux is root and the source qemu is not: a socket's chmod and chown
// go by path, and in a directory the VM's uid can write, qemu could swap
// the socket for a link to a file of the host between bind and chmod, and
// be handed that file. So sockets are only ever made, chmodded and
// chowned in a directory no one else can write: one Start makes
// (0700, crimux's) and hands to the VM's uid only once its sockets are
// ready, or one that already exists and only crimux's uid can write.

// prepareDir makes dir, 0700, if absent, and records it for the handing
// over and for Close; a dir that exists must be crimux's alone.
func (fw *Forwarder) prepareDir(dir string) error {
	if slices.Contains(fw.madeDirs, dir) {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err == nil {
		return checkPrivate(dir, fi)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("socket directory: %w", err)
	}
	// The parents stay traversable (0755): qemu must reach dir by path.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil { // a umask only takes bits away
		return fmt.Errorf("socket directory: %w", err)
	}
	fw.madeDirs = append(fw.madeDirs, dir)
	return nil
}

// checkPrivate refuses an existing socket directory that is a symlink, or
// that another uid, group or everyone can write.
func checkPrivate(dir string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s: not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("socket directory %s: not owned by crimux's uid %d", dir, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("socket directory %s: writable by group or others (%v)", dir, fi.Mode().Perm())
	}
	return nil
}

// listen binds the unix socket at path and gives it to uid:gid, mode
// 0600, so the source qemu, and no other VM, can connect. The listener
// unlinks the socket when closed; it is recorded first, so Close removes
// a socket whose chmod or chown failed.
func (fw *Forwarder) listen(path string, uid, gid int) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	fw.listeners = append(fw.listeners, ln)
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return nil, fmt.Errorf("socket owner: %w", err)
	}
	return ln, nil
}
