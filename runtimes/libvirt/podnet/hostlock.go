package podnet

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// hostLock orders GC against ADDs and DELs across the host's crimuxes: a
// file beside the namespace dir, read-locked while any ADD or DEL of this
// crimux is under way (from before it creates its namespace until its
// plugin returned) and write-locked by a GC round (from before it lists
// the namespaces until its plugins returned).
//
// inflight orders one crimux's own calls; a crimux beside it on the same
// network shows its pods only by their namespaces, which GC lists as
// foreign. Without the lock, an ADD of the other crimux that made its
// namespace after the list was read would lose its fresh address to the
// GC. (containerd lists its pods from before their ADD.)
//
// The locks are POSIX record locks, the process's own: a GC round upgrades
// the read lock this crimux's calls in flight hold (inflight lets a round
// run beside them and names them), atomically, waiting only for the other
// crimuxes' calls. Two rounds that would each wait for the other's calls
// get EDEADLK from the kernel; that round is skipped (GC runs again at the
// next pass).
type hostLock struct {
	path string
	once sync.Once
	file *os.File
	err  error
}

// hostLockOf is the lock of the namespace dir netnsDir: netnsDir.lock
// (none without a dir).
func hostLockOf(netnsDir string) *hostLock {
	if netnsDir == "" {
		return nil
	}
	return &hostLock{path: netnsDir + ".lock"}
}

// errGCDeadlock: another crimux's GC round waits for this one's calls
// while this one waits for its calls.
var errGCDeadlock = errors.New("another crimux's GC round is waiting for this crimux's calls: round skipped")

// set takes (or drops: unix.F_UNLCK) the lock, waiting for other crimuxes.
// A lock file that cannot be opened is no lock: GC is then ordered only
// against this crimux's own calls, as without other crimuxes.
func (l *hostLock) set(typ int16) error {
	if l == nil {
		return nil
	}
	l.once.Do(func() {
		// Kept open for the process's life: closing any descriptor of
		// the file drops the process's POSIX locks on it.
		l.file, l.err = os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	})
	if l.err != nil {
		return nil
	}
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0}
	for {
		err := unix.FcntlFlock(l.file.Fd(), unix.F_SETLKW, &lk)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EDEADLK):
			return errGCDeadlock
		default:
			return fmt.Errorf("lock %s: %w", l.path, err)
		}
	}
}
