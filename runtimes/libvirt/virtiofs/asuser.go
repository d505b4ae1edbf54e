package virtiofs

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// userView is where, in the helper's own mount namespace, a share that
// acts as a user is bound for virtiofsd to find it: virtiofsd resolves
// its source by path as that user, who may not pass the directories
// above it (kubelet's pod directories are root's, 0750), as a container
// never has to. A tmpfs there, 0755, holds the share at its host path:
// source=/tmp/var/lib/kubelet/pods/…. Nothing is mounted in the host's
// namespace, and virtiofsd's pivot_root leaves the rest behind.
const userView = "/tmp"

// UserViewPath is where virtiofsd finds the share dir that acts as a
// user.
func UserViewPath(dir string) string { return filepath.Join(userView, dir) }

// exposeForUser binds dir (read-only if it was made so) at
// UserViewPath(dir). It opens dir first: dir may be under userView.
func exposeForUser(dir string) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("tmpfs", userView, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", userView, err)
	}
	target := UserViewPath(dir)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	// Recursive, as virtiofsd's own bind of its source is; the mount of a
	// read-only share was made non-recursive, read-only, and stays so.
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", dir, target, err)
	}
	return nil
}

// nofileWanted is what virtiofsd raises its descriptor limit to when it
// runs as root (it keeps a descriptor per inode the guest knows).
const nofileWanted = 1_000_000

// raiseNofile gives virtiofsd, which cannot raise its hard limit in a user
// namespace, the limit it would give itself (--rlimit-nofile=0 then keeps
// it): up to nofileWanted, or at least the current hard limit.
func raiseNofile() {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	want := max(lim.Max, nofileWanted)
	if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}) != nil {
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim.Max, Max: lim.Max})
	}
}
