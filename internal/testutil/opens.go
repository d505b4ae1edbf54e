package testutil

import (
	"testing"

	"golang.org/x/sys/unix"
)

// WatchOpens counts the opens of path from now on (inotify's IN_OPEN: an
// O_PATH descriptor, which does no I/O, is not an open). The returned
// function reports the opens since its last call.
func WatchOpens(t *testing.T, path string) func() int {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(in) })
	if _, err := unix.InotifyAddWatch(in, path, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() int {
		buf := make([]byte, 4096)
		n, err := unix.Read(in, buf)
		if err != nil {
			return 0
		}
		return n / unix.SizeofInotifyEvent
	}
}
