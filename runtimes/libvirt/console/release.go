package console

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Where qemu writes console.log itself (qemu.conf stdio_handler = "file",
// which crimux's node setup asks for: a virtlogd killed or restarted
// loses every VM's console from then on, since qemu's pipe to it is not
// made again), nothing rotates it. So the copier gives back the disk
// blocks of what it has copied into the CRI log, bar the last keepCopied:
// a hole punched in the file (FALLOC_FL_PUNCH_HOLE, KEEP_SIZE), which qemu,
// appending, never notices. A guest writing its console without end then
// costs the node what crimux has not copied yet, not everything it wrote.
const (
	keepCopied   = 2 << 20
	releaseChunk = 1 << 20
)

// releaseRootOwned lets tests, which run as root, release files root
// owns. crimux never does: a console.log owned by root is virtlogd's
// (which rotates it) or one a hostile qemu linked to a file of the host.
var releaseRootOwned = false

// release punches out console.log's copied bytes below copied-keepCopied,
// a chunk at a time, in the file the copier reads (same inode, a regular
// file with one link, not root's).
func (cp *copier) release(copied int64) {
	upTo := (copied - keepCopied) / releaseChunk * releaseChunk
	if upTo <= cp.released || cp.in == nil {
		return
	}
	fd, err := unix.Open(cp.src, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), cp.src)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || st.Ino != cp.ino || st.Nlink != 1 || (st.Uid == 0 && !releaseRootOwned) {
		return
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, upTo); err != nil {
		cp.log.Debug("console log: copied bytes not released", "path", cp.src, "err", err)
		return
	}
	cp.released = upTo
}
