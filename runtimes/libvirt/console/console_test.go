package console

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// criLine is one line of the CRI log format.
var criLine = regexp.MustCompile(`^(\S+) stdout ([FP]) (.*)$`)

// entry is a CRI log line without its time.
type entry struct{ tag, text string }

// readCRI parses a CRI log; the test fails on a line not in the format.
func readCRI(t *testing.T, path string) []entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasSuffix(l, "\n") {
			t.Fatalf("CRI log line %q does not end with a newline", l)
		}
		m := criLine.FindStringSubmatch(strings.TrimSuffix(l, "\n"))
		if m == nil {
			t.Fatalf("CRI log line %q is not <time> stdout F|P <text>", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Fatalf("CRI log time %q: %v", m[1], err)
		}
		out = append(out, entry{m[2], m[3]})
	}
	return out
}

func wantEntries(t *testing.T, got []entry, want ...entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("CRI log %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("CRI log %q, want %q", got, want)
		}
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, for a few seconds at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// vm is a VM's dir with its console.log, and a CRI log path.
type vm struct{ dir, src, dst string }

func newVM(t *testing.T) vm {
	dir := t.TempDir()
	return vm{dir: dir, src: filepath.Join(dir, "console.log"), dst: filepath.Join(t.TempDir(), "vm", "0.log")}
}

// copierOf is a copier driven by hand (no goroutine): each copy is one
// poll.
func copierOf(t *testing.T, v vm) *copier {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cp := &copier{src: v.src, dst: v.dst, offsetFile: filepath.Join(v.dir, offsetFileName), log: discard()}
	cp.resume = readOffset(cp.offsetFile)
	if err := cp.openDst(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.closeFiles)
	return cp
}

func offsetOf(t *testing.T, v vm) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v.dir, offsetFileName))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCopyLines: each console line becomes a CRI line; the \r of \r\n
// goes; a line without its end waits.
func TestCopyLines(t *testing.T) {
	for _, tc := range []struct {
		name    string
		console string
		want    []entry
		offset  int64
	}{
		{"lines", "one\ntwo\n", []entry{{"F", "one"}, {"F", "two"}}, 8},
		{"serial line ends", "Booting\r\nlogin\r\n", []entry{{"F", "Booting"}, {"F", "login"}}, 16},
		{"a lone \\r is kept", "a\rb\n", []entry{{"F", "a\rb"}}, 4},
		{"empty lines", "\n\r\n", []entry{{"F", ""}, {"F", ""}}, 3},
		{"a partial line waits", "done\nlogin: ", []entry{{"F", "done"}}, 5},
		{"only a partial line", "login: ", nil, 0},
		{"nothing", "", nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVM(t)
			if err := os.WriteFile(v.src, []byte(tc.console), 0o644); err != nil {
				t.Fatal(err)
			}
			cp := copierOf(t, v)
			cp.copy(false)
			wantEntries(t, readCRI(t, v.dst), tc.want...)
			if tc.offset >= 0 {
				// The offset kept is of what is in the CRI log: a partial
				// line is read again after a restart, not skipped.
				if got := offsetOf(t, v); got != tc.offset {
					t.Fatalf("offset %d, want %d", got, tc.offset)
				}
			}
		})
	}
}

// TestPartialLine: a line that waits longer than partialAfter is written
// as P; its end, when it comes, as F. At stop the rest goes out as P.
func TestPartialLine(t *testing.T) {
	v := newVM(t)
	cp := copierOf(t, v)
	appendTo(t, v.src, "login: ")
	cp.copy(false)
	wantEntries(t, readCRI(t, v.dst))
	cp.since = time.Now().Add(-2 * partialAfter) // it waited
	cp.copy(false)
	wantEntries(t, readCRI(t, v.dst), entry{"P", "login: "})
	if got := offsetOf(t, v); got != 7 {
		t.Fatalf("offset %d after the partial line, want 7", got)
	}
	appendTo(t, v.src, "root\r\nPassword: ")
	cp.copy(false)
	wantEntries(t, readCRI(t, v.dst), entry{"P", "login: "}, entry{"F", "root"})
	cp.copy(true) // stop
	wantEntries(t, readCRI(t, v.dst), entry{"P", "login: "}, entry{"F", "root"}, entry{"P", "Password: "})
	if got := offsetOf(t, v); got != 23 {
		t.Fatalf("offset %d at stop, want all 23 bytes", got)
	}
}

// TestLongLine: a line that grows beyond maxLineBytes before its end
// comes is cut into pieces of maxLineBytes, the pieces but the last
// tagged P (the line goes on); no byte is lost.
func TestLongLine(t *testing.T) {
	v := newVM(t)
	cp := copierOf(t, v)
	line := strings.Repeat("0123456789", (2*maxLineBytes+500)/10)
	appendTo(t, v.src, line)
	cp.copy(false)
	appendTo(t, v.src, "\n")
	cp.copy(false)
	got := readCRI(t, v.dst)
	var joined strings.Builder
	for _, e := range got {
		if len(e.text) > maxLineBytes {
			t.Fatalf("a CRI line of %d bytes, want at most %d", len(e.text), maxLineBytes)
		}
		joined.WriteString(e.text)
	}
	if len(got) != 3 {
		t.Fatalf("%d CRI lines for a line of %d bytes, want 3", len(got), len(line))
	}
	if joined.String() != line {
		t.Fatalf("a long line lost bytes: %d copied of %d", joined.Len(), len(line))
	}
	for _, e := range got[:len(got)-1] {
		if e.tag != "P" {
			t.Fatalf("a piece of a long line tagged %s, want P (the line goes on)", e.tag)
		}
	}
}

// TestTruncatedConsole: a console.log shorter than the offset (replaced)
// is copied from its start.
func TestTruncatedConsole(t *testing.T) {
	v := newVM(t)
	if err := os.WriteFile(filepath.Join(v.dir, offsetFileName), []byte("1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "new boot\n")
	cp := copierOf(t, v)
	cp.copy(false)
	wantEntries(t, readCRI(t, v.dst), entry{"F", "new boot"})
}

// TestResumeAfterRestart: a copier started again (crimux restarted)
// neither repeats nor skips: what was written while it was down is
// copied once, and a partial line pending at a crash is read again.
func TestResumeAfterRestart(t *testing.T) {
	v := newVM(t)
	cs := New(discard())
	appendTo(t, v.src, "first\n")
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs.Start("c1", v.dir, v.dst)
	waitFor(t, "the first line", func() bool { return len(readCRI(t, v.dst)) == 1 })
	cs.Stop("c1")
	appendTo(t, v.src, "while down\n")
	cs.Start("c1", v.dir, v.dst)
	appendTo(t, v.src, "after\n")
	waitFor(t, "the lines after the restart", func() bool { return len(readCRI(t, v.dst)) >= 3 })
	cs.Stop("c1")
	wantEntries(t, readCRI(t, v.dst), entry{"F", "first"}, entry{"F", "while down"}, entry{"F", "after"})

	// A crash with a partial line pending: the offset file does not
	// count it, so the next copier reads it again.
	w := newVM(t)
	appendTo(t, w.src, "a\npar")
	cp := copierOf(t, w)
	cp.copy(false) // then crimux dies: no stop
	cs.Start("c2", w.dir, w.dst)
	appendTo(t, w.src, "tial\n")
	waitFor(t, "the partial line's end", func() bool { return len(readCRI(t, w.dst)) >= 2 })
	cs.Stop("c2")
	wantEntries(t, readCRI(t, w.dst), entry{"F", "a"}, entry{"F", "partial"})
}

// TestCopierWaitsAndFlushesPartialLines: the running copier writes a
// partial line after it waited, and follows a console.log made late.
func TestCopierWaitsAndFlushesPartialLines(t *testing.T) {
	t.Parallel()
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.Start("c1", v.dir, v.dst)
	defer cs.StopAll()
	time.Sleep(2 * consolePoll) // no console.log yet: virtlogd has not made it
	start := time.Now()
	appendTo(t, v.src, "login: ")
	waitFor(t, "the partial line", func() bool { return len(readCRI(t, v.dst)) == 1 })
	if waited := time.Since(start); waited < partialAfter {
		t.Fatalf("partial line written after %s, want after %s", waited, partialAfter)
	}
	wantEntries(t, readCRI(t, v.dst), entry{"P", "login: "})
}

// TestReopen: after the CRI log was rotated (renamed), Reopen makes the
// copier write to a new file at the path.
func TestReopen(t *testing.T) {
	v := newVM(t)
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs := New(discard())
	cs.Start("c1", v.dir, v.dst)
	defer cs.StopAll()
	appendTo(t, v.src, "before\n")
	waitFor(t, "the first line", func() bool { return len(readCRI(t, v.dst)) == 1 })
	if err := os.Rename(v.dst, v.dst+".1"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "between\n") // may land in either: kubelet reopens right after renaming
	if err := cs.Reopen("c1"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "after\n")
	waitFor(t, "the line after the rotation", func() bool {
		got := readCRI(t, v.dst)
		return len(got) > 0 && got[len(got)-1].text == "after"
	})
	old, cur := readCRI(t, v.dst+".1"), readCRI(t, v.dst)
	if old[0].text != "before" || len(old)+len(cur) != 3 {
		t.Fatalf("rotated %q, new %q: want before, between and after once each", old, cur)
	}
	if err := os.Remove(filepath.Dir(v.dst) + "/0.log"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Dir(v.dst) + "/0.log.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Dir(v.dst)); err != nil {
		t.Fatal(err)
	}
	if err := cs.Reopen("c1"); err == nil {
		t.Fatal("Reopen into a directory that is gone succeeded")
	}
}

// TestConsoles: the set of copiers: no copier without a log path, one
// per VM, none after Stop; a copier whose CRI log cannot be opened ends
// at once.
func TestConsoles(t *testing.T) {
	cs := New(discard())
	v := newVM(t)
	cs.Start("nolog", v.dir, "")
	if err := cs.Reopen("nolog"); err != nil {
		t.Fatal(err)
	}
	cs.Stop("nolog")
	cs.Stop("never started")
	if n := len(cs.copiers); n != 0 {
		t.Fatalf("%d copiers without a log path", n)
	}
	if err := os.MkdirAll(filepath.Dir(v.dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cs.Start("c1", v.dir, v.dst)
	cs.Start("c1", v.dir, v.dst) // twice: one copier
	appendTo(t, v.src, "once\n")
	// A CRI log that cannot be opened yet is tried again, not given up:
	// what the console wrote meanwhile is copied once it can be.
	w := newVM(t)
	late := filepath.Join(w.dir, "no", "such", "dir", "0.log")
	cs.Start("late", w.dir, late)
	appendTo(t, w.src, "kept\n")
	if err := cs.Reopen("late"); err == nil {
		t.Fatal("Reopen of a CRI log that cannot be opened succeeded")
	}
	if err := os.MkdirAll(filepath.Dir(late), 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the line written before the CRI log could be opened", func() bool { return len(readCRI(t, late)) == 1 })
	wantEntries(t, readCRI(t, late), entry{"F", "kept"})
	cs.StopAll()
	if n := len(cs.copiers); n != 0 {
		t.Fatalf("%d copiers after StopAll", n)
	}
	wantEntries(t, readCRI(t, v.dst), entry{"F", "once"})
}

func TestOffsetFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, offsetFileName)
	if n := readOffset(p); n != (position{}) {
		t.Fatalf("offset without a file: %v", n)
	}
	writeOffset(p, position{ino: 7, offset: 42})
	if n := readOffset(p); n != (position{ino: 7, offset: 42}) {
		t.Fatalf("offset %v, want 42 in inode 7", n)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Fatal("temporary offset file left")
	}
	if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := readOffset(p); n != (position{}) {
		t.Fatalf("offset of a garbled file: %v, want none", n)
	}
	writeOffset(filepath.Join(dir, "no", "dir", offsetFileName), position{offset: 1}) // unwritable: ignored
}

// TestQuietConsoleWritesNothing: a poll that finds nothing new leaves the
// offset file alone (it was replaced, a new inode, on every poll of every
// VM: 20 file creations and renames a second per VM), and the next line
// moves it again.
func TestQuietConsoleWritesNothing(t *testing.T) {
	v := newVM(t)
	if err := os.WriteFile(v.src, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := copierOf(t, v)
	cp.copy(false)
	inode := func() uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(v.dir, offsetFileName), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	first := inode()
	for range 3 {
		cp.copy(false)
	}
	if got := inode(); got != first {
		t.Fatalf("quiet polls replaced the offset file (inode %d -> %d)", first, got)
	}
	f, err := os.OpenFile(v.src, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("two\n")
	f.Close()
	cp.copy(false)
	if got := offsetOf(t, v); got != 8 {
		t.Fatalf("offset after a new line = %d, want 8", got)
	}
	wantEntries(t, readCRI(t, v.dst), entry{"F", "one"}, entry{"F", "two"})
}

// TestCopiedConsoleReleased: a console.log qemu writes itself is never
// rotated, so what was copied into the CRI log is given back to the
// filesystem (a hole), bar the last 2 MiB; the file keeps its size, and
// every line reaches the CRI log.
func TestCopiedConsoleReleased(t *testing.T) {
	releaseRootOwned = true
	t.Cleanup(func() { releaseRootOwned = false })
	v := newVM(t)
	cp := copierOf(t, v)
	line := strings.Repeat("x", 1023) + "\n"
	for range 8 { // 8 MiB, copied a MiB at a time
		appendTo(t, v.src, strings.Repeat(line, 1024))
		cp.copy(false)
	}
	var st unix.Stat_t
	if err := unix.Stat(v.src, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 8<<20 || st.Blocks*512 > 3<<20 {
		t.Fatalf("console.log: size %d, %d bytes on disk; want 8 MiB and at most 3 MiB (the last 2 kept)", st.Size, st.Blocks*512)
	}
	if got := len(readCRI(t, v.dst)); got != 8*1024 {
		t.Fatalf("%d lines in the CRI log, want %d", got, 8*1024)
	}
	// A root-owned console.log (virtlogd's) is left alone.
	releaseRootOwned = false
	w := newVM(t)
	cp2 := copierOf(t, w)
	appendTo(t, w.src, strings.Repeat(line, 8*1024))
	cp2.copy(false)
	if err := unix.Stat(w.src, &st); err != nil || st.Blocks*512 < 8<<20 {
		t.Fatalf("a root-owned console.log was released: %d bytes on disk (%v)", st.Blocks*512, err)
	}
}
