package console

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func copierFor(t *testing.T, cs *Consoles, id string) *copier {
	t.Helper()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cp, ok := cs.copiers[id]
	if !ok {
		t.Fatalf("no copier for %s", id)
	}
	return cp
}

// TestQuietConsoleIsNotRead: a VM whose console says nothing costs crimux
// nothing. Its copier used to read console.log every 50 ms: 20 wake-ups
// and three syscalls a second per VM, whether the guest wrote or not;
// with 50 guests booting at once that was crimux's whole CPU in the
// bench's burst, taken from the guests.
func TestQuietConsoleIsNotRead(t *testing.T) {
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.recheck = time.Hour // every pass below is one inotify asked for
	cs.Start("c1", v.dir, v.dst)
	defer cs.StopAll()
	appendTo(t, v.src, "booted\n")
	waitFor(t, "the first line", func() bool { return len(readCRI(t, v.dst)) == 1 })
	cp := copierFor(t, cs, "c1")
	before := cp.passes.Load()
	time.Sleep(time.Second)
	if n := cp.passes.Load() - before; n > 1 {
		t.Fatalf("%d passes over a quiet console.log in a second, want at most 1", n)
	}
	appendTo(t, v.src, "woken\n")
	waitFor(t, "the line written after the quiet", func() bool { return len(readCRI(t, v.dst)) == 2 })
	wantEntries(t, readCRI(t, v.dst), entry{"F", "booted"}, entry{"F", "woken"})
}

// TestRotatedConsoleIsFollowed: virtlogd renames a full console.log to
// console.log.0 and makes a new one; the copier, woken by the new file,
// reads the old one to its end and the new one from its start.
func TestRotatedConsoleIsFollowed(t *testing.T) {
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.recheck = time.Hour
	cs.Start("c1", v.dir, v.dst)
	defer cs.StopAll()
	appendTo(t, v.src, "one\n")
	waitFor(t, "the first line", func() bool { return len(readCRI(t, v.dst)) == 1 })
	// Written to console.log just before the rotation, never seen there.
	cp := copierFor(t, cs, "c1")
	appendTo(t, v.src, "two\n")
	if err := os.Rename(v.src, v.src+".0"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "three\n")
	waitFor(t, "the line in the new console.log", func() bool { return len(readCRI(t, v.dst)) == 3 })
	wantEntries(t, readCRI(t, v.dst), entry{"F", "one"}, entry{"F", "two"}, entry{"F", "three"})
	if cp.passes.Load() > 10 {
		t.Fatalf("%d passes for three lines", cp.passes.Load())
	}
}

// TestUnwatchableConsoleIsPolled: a console whose directory inotify
// cannot watch (here: not made yet; on a host, the watch limit reached)
// is polled every consolePoll instead, and copied all the same.
func TestUnwatchableConsoleIsPolled(t *testing.T) {
	v := newVM(t)
	dir := filepath.Join(v.dir, "later")
	src := filepath.Join(dir, "console.log")
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.recheck = time.Hour
	cs.Start("c1", dir, v.dst)
	defer cs.StopAll()
	if cp := copierFor(t, cs, "c1"); cp.notify != nil || cp.recheck != consolePoll {
		t.Fatalf("copier of an unwatchable directory: notify %v, recheck %s; want none, %s", cp.notify, cp.recheck, consolePoll)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendTo(t, src, "polled\n")
	waitFor(t, "the polled line", func() bool { return len(readCRI(t, v.dst)) == 1 })
}

// TestNotifierGoesWithTheLastCopier: the inotify instance is made with
// the first copier and closed with the last; a later copier makes a new
// one.
func TestNotifierGoesWithTheLastCopier(t *testing.T) {
	cs := New(discard())
	cs.recheck = time.Hour
	a, b := newVM(t), newVM(t)
	for _, v := range []vm{a, b} {
		if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cs.Start("a", a.dir, a.dst)
	cs.Start("b", b.dir, b.dst)
	n := cs.notify
	if n == nil || copierFor(t, cs, "a").notify != n || copierFor(t, cs, "b").notify != n {
		t.Fatal("the copiers do not share one notifier")
	}
	cs.Stop("a")
	if cs.notify != n {
		t.Fatal("the notifier went with a copier still running")
	}
	appendTo(t, b.src, "still woken\n")
	waitFor(t, "b's line after a stopped", func() bool { return len(readCRI(t, b.dst)) == 1 })
	cs.Stop("b")
	if cs.notify != nil {
		t.Fatal("the notifier outlived its last copier")
	}
	if _, err := n.f.Stat(); err == nil {
		t.Fatal("the last copier's notifier is still open")
	}
	cs.Start("a", a.dir, a.dst)
	defer cs.StopAll()
	appendTo(t, a.src, "again\n")
	waitFor(t, "a's line with a new notifier", func() bool { return len(readCRI(t, a.dst)) == 1 })
}

// event encodes one inotify event as the kernel does (name NUL-padded).
func event(wd int32, mask uint32, name string) []byte {
	padded := 0
	if name != "" {
		padded = (len(name) + 1 + 15) &^ 15
	}
	b := make([]byte, unix.SizeofInotifyEvent+padded)
	ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
	ev.Wd, ev.Mask, ev.Len = wd, mask, uint32(padded)
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// TestDispatch: which events wake which copiers: console.log's own, not
// the copier's offset file; all on an overflow (events were lost); a
// directory that went forgets its watch.
func TestDispatch(t *testing.T) {
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	n := &notifier{wakes: map[int32][]chan struct{}{1: {a}, 2: {b}}}
	woken := func() (wa, wb bool) {
		select {
		case <-a:
			wa = true
		default:
		}
		select {
		case <-b:
			wb = true
		default:
		}
		return wa, wb
	}
	for _, tc := range []struct {
		name   string
		events [][]byte
		wa, wb bool
	}{
		{"console.log written", [][]byte{event(1, unix.IN_MODIFY, "console.log")}, true, false},
		{"console.log made", [][]byte{event(2, unix.IN_CREATE, "console.log")}, false, true},
		{"the offset file", [][]byte{event(1, unix.IN_CREATE, offsetFileName+".tmp"), event(1, unix.IN_MOVED_TO, offsetFileName)}, false, false},
		{"a rotated file", [][]byte{event(1, unix.IN_MODIFY, "console.log.0")}, false, false},
		{"overflow", [][]byte{event(-1, unix.IN_Q_OVERFLOW, "")}, true, true},
		{"several at once", [][]byte{event(1, unix.IN_MODIFY, "console.log"), event(1, unix.IN_MODIFY, "console.log"), event(2, unix.IN_MODIFY, "console.log")}, true, true},
		{"a truncated read", [][]byte{event(1, unix.IN_MODIFY, "console.log")[:unix.SizeofInotifyEvent+2]}, false, false},
	} {
		n.dispatch(bytes.Join(tc.events, nil))
		if wa, wb := woken(); wa != tc.wa || wb != tc.wb {
			t.Errorf("%s: woke a %v, b %v; want %v, %v", tc.name, wa, wb, tc.wa, tc.wb)
		}
	}
	n.dispatch(event(2, unix.IN_IGNORED, ""))
	if _, ok := n.wakes[2]; ok {
		t.Error("a watch the kernel dropped is kept")
	}
}
