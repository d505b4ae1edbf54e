package saveimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fifo is a FIFO this package created. It is held by an O_PATH handle and
// reopened through /proc/self/fd, so every open reaches the inode mkfifo
// made even if someone swaps the path for a link or a file: crimux runs
// as root and must not be steered into writing elsewhere.
type fifo struct {
	path   string
	handle int
}

// makeFIFO creates path as a FIFO, failing if it exists. Mode 0600 keeps it
// to root (libvirtd opens restore paths as root); the umask can only take
// bits away from that.
func makeFIFO(path string) (*fifo, error) {
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("create fifo %s: %w", path, err)
	}
	handle, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("hold fifo %s: %w", path, err)
	}
	if err := checkFIFO(handle); err != nil {
		// Not removed: whatever is at path now is not ours.
		unix.Close(handle)
		return nil, fmt.Errorf("fifo %s right after mkfifo: %w", path, err)
	}
	return &fifo{path: path, handle: handle}, nil
}

func checkFIFO(handle int) error {
	var st unix.Stat_t
	if err := unix.Fstat(handle, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fmt.Errorf("replaced by a file of mode %#o", st.Mode)
	}
	return nil
}

func (f *fifo) reopen(flags int) (int, error) {
	return unix.Open("/proc/self/fd/"+strconv.Itoa(f.handle), flags|unix.O_CLOEXEC, 0)
}

type openResult struct {
	fd  int
	err error
}

// openWriter opens the FIFO for writing, which blocks until a reader
// (libvirtd) opens it; ctx ends the wait. The blocking open in a goroutine
// starts the feed the moment libvirtd arrives, where a non-blocking open
// retried on ENXIO would add up to one poll interval to every clone's
// start. Opening O_RDWR would never block, but then the FIFO always has a
// reader, so a libvirtd that gives up could not be told by EPIPE.
//
// The returned file is non-blocking, so its writes go through Go's poller
// and a write deadline can stop them when qemu stops reading.
func (f *fifo) openWriter(ctx context.Context) (*os.File, error) {
	opened := make(chan openResult, 1)
	go func() {
		fd, err := f.reopen(unix.O_WRONLY)
		opened <- openResult{fd, err}
	}()
	select {
	case r := <-opened:
		if r.err != nil {
			return nil, fmt.Errorf("open fifo %s for writing: %w", f.path, r.err)
		}
		if err := unix.SetNonblock(r.fd, true); err != nil {
			unix.Close(r.fd)
			return nil, fmt.Errorf("make fifo %s non-blocking: %w", f.path, err)
		}
		return os.NewFile(uintptr(r.fd), f.path), nil
	case <-ctx.Done():
		f.unblock(opened)
		return nil, fmt.Errorf("fifo %s: no reader opened it: %w", f.path, ctx.Err())
	}
}

// unblock ends the writer's pending open by opening the FIFO as a reader
// itself, the way containerd's fifo package cancels an open: a
// non-blocking read open of a FIFO succeeds at once and wakes the writer.
// If even that fails (no fds left), the writer's goroutine is left to
// close whatever it gets rather than hang its caller.
func (f *fifo) unblock(opened <-chan openResult) {
	rd, err := f.reopen(unix.O_RDONLY | unix.O_NONBLOCK)
	if err != nil {
		go closeOpened(opened)
		return
	}
	closeOpened(opened)
	unix.Close(rd)
}

func closeOpened(opened <-chan openResult) {
	if r := <-opened; r.err == nil {
		unix.Close(r.fd)
	}
}

// remove unlinks the FIFO. A reader that has it open keeps reading.
func (f *fifo) remove() error {
	unix.Close(f.handle)
	if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove fifo: %w", err)
	}
	return nil
}
