package podnet

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/mountinfo"
)

// ensureSharedDir makes dir a mount point with shared propagation (a bind
// mount of itself, as `ip netns` does), so that a namespace unmounted here
// is unmounted too in the mount namespaces cloned after it was mounted.
func ensureSharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mounted, err := mountinfo.IsMountPoint(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount %s on itself: %w", dir, err)
		}
	}
	if err := unix.Mount("none", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// createNetNS makes a new network namespace and bind-mounts it at path.
// An existing namespace at path is kept (a retried create); a file left
// there without one (a crash between the two steps) is replaced.
func createNetNS(path string) error {
	if isNetNS(path) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stale netns file %s: %w", path, err)
	}
	return onThreadIn(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare network namespace: %w", err)
		}
		return nil
	}, func() error {
		return bindNetNS(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path)
	})
}

// bindNetNS mounts the namespace at src (a /proc ns file or another
// mount of one) at dst, a new file.
func bindNetNS(src, dst string) error {
	f, err := os.OpenFile(dst, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file %s: %w", dst, err)
	}
	f.Close()
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("bind mount netns %s at %s: %w", src, dst, err)
	}
	return nil
}

// isNetNS tells whether path is a mounted network namespace.
func isNetNS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// removeNetNS unmounts and removes the namespace file at path; a missing
// one is already removed.
func removeNetNS(path string) error {
	if isNetNS(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns file %s: %w", path, err)
	}
	return nil
}

// inNetNS runs fn on a thread inside the namespace at path.
func inNetNS(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	return onThreadIn(func() error {
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", path, err)
		}
		return nil
	}, fn)
}

// onThreadIn runs fn on a locked thread that enter has moved into another
// network namespace, then returns the thread to the namespace it came
// from. No thread may stay behind: it would hold the namespace alive
// after its removal, and the Go runtime parks the main thread rather than
// ending it, which would put the whole process in a pod's namespace. If
// the way back fails the thread stays locked and is discarded with its
// goroutine. A failed enter leaves the thread where it was.
func onThreadIn(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer origin.Close()
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to own netns: %w", err))
			return // thread stays locked: discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
