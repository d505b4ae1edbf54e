package console

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A notifier wakes copiers when virtlogd writes their console.log: one
// inotify instance for all of crimux's VMs, a watch on each VM's
// directory (console.log may not exist yet, and virtlogd rotates it by
// renaming it and making a new one). A copier then reads only when its
// guest wrote something; a quiet VM costs crimux nothing. Polling every
// VM's console.log every 50 ms instead cost 20 wake-ups and three
// syscalls a second per VM, a tenth of a core with 50 VMs booting
// (measured in the bench's burst), taken from the guests.
type notifier struct {
	f  *os.File
	mu sync.Mutex
	// wakes are the copiers' wake channels by watch descriptor.
	wakes map[int32][]chan struct{}
}

// notifyMask: what a directory watch reports of the files in it: writes,
// files made or renamed into it (console.log made, or made again after a
// rotation).
const notifyMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO

func newNotifier() (*notifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking: reads park in Go's poller, and Close ends them.
	n := &notifier{f: os.NewFile(uintptr(fd), "inotify"), wakes: map[int32][]chan struct{}{}}
	go n.run()
	return n, nil
}

// watch has wake signalled (without blocking) whenever console.log in dir
// changes; it returns the watch descriptor for unwatch.
func (n *notifier) watch(dir string, wake chan struct{}) (int32, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wd, err := unix.InotifyAddWatch(int(n.f.Fd()), dir, notifyMask|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	if err != nil {
		return 0, &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	n.wakes[int32(wd)] = append(n.wakes[int32(wd)], wake)
	return int32(wd), nil
}

// unwatch stops signalling wake for wd; the watch goes with its last
// copier.
func (n *notifier) unwatch(wd int32, wake chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := n.wakes[wd]
	for i, w := range ws {
		if w == wake {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) > 0 {
		n.wakes[wd] = ws
		return
	}
	if _, ok := n.wakes[wd]; ok {
		delete(n.wakes, wd)
		// Fails harmlessly when the directory went and took its watch.
		_, _ = unix.InotifyRmWatch(int(n.f.Fd()), uint32(wd))
	}
}

// idle reports whether no copier is watched.
func (n *notifier) idle() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.wakes) == 0
}

// close ends the notifier; its copiers fall back to their recheck.
func (n *notifier) close() { n.f.Close() }

// run reads events until close, waking the copiers they concern.
func (n *notifier) run() {
	buf := make([]byte, 64<<10)
	for {
		k, err := n.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue // EINTR and the like: the fd is still good
		}
		n.dispatch(buf[:k])
	}
}

// consoleName is console.log's name as inotify reports it.
var consoleName = []byte("console.log")

// dispatch wakes the copiers of the events in buf: each event on
// console.log wakes its directory's copiers; a queue overflow (events
// were dropped) wakes every copier.
func (n *notifier) dispatch(buf []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return
		}
		name := bytes.TrimRight(buf[unix.SizeofInotifyEvent:end], "\x00")
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			for _, ws := range n.wakes {
				signal(ws)
			}
		case ev.Mask&unix.IN_IGNORED != 0:
			delete(n.wakes, ev.Wd) // the directory went, and its watch with it
		case bytes.Equal(name, consoleName):
			signal(n.wakes[ev.Wd])
		}
		buf = buf[end:]
	}
}

// signal wakes each channel without blocking: one pending wake-up is
// enough, the copier reads all that is new.
func signal(ws []chan struct{}) {
	for _, w := range ws {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}
