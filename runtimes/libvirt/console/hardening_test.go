package console

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRotationFollowed: virtlogd renames a full console.log to
// console.log.0 and starts a new one; what the old file got after the last
// poll, and the new file from its start, are both copied, once.
func TestRotationFollowed(t *testing.T) {
	v := newVM(t)
	cp := copierOf(t, v)
	appendTo(t, v.src, "boot 1\n")
	cp.copy(false)
	appendTo(t, v.src, "tail of the old file\n") // after the last poll
	if err := os.Rename(v.src, v.src+".0"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, v.src, "start of the new file, longer than the old offset\n")
	cp.copy(false)
	wantEntries(t, readCRI(t, v.dst), entry{"F", "boot 1"}, entry{"F", "tail of the old file"},
		entry{"F", "start of the new file, longer than the old offset"})
	appendTo(t, v.src, "more\n")
	cp.copy(false)
	if got := readCRI(t, v.dst); len(got) != 4 || got[3] != (entry{"F", "more"}) {
		t.Fatalf("after the rotation: %q", got)
	}
}

// TestCopyIsBounded: a console.log of 24 MiB (a guest that wrote while
// crimux was down) is copied whole and exactly, a chunk at a time: the
// heap does not grow by the file's size.
func TestCopyIsBounded(t *testing.T) {
	v := newVM(t)
	f, err := os.Create(v.src)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1000)
	const lines = 24 << 10
	for i := 0; i < lines; i++ {
		fmt.Fprintf(f, "%06d %s\n", i, line)
	}
	f.Close()
	cp := copierOf(t, v)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak, stop := heapPeak()
	cp.copy(false)
	if grown := int64(stop()) - int64(before.HeapInuse); grown > 16<<20 {
		t.Errorf("copying 24 MiB grew the heap by %d MiB at its peak (%d MiB), want a bounded buffer", grown>>20, *peak>>20)
	}
	got := readCRI(t, v.dst)
	if len(got) != lines || got[lines-1].text != fmt.Sprintf("%06d %s", lines-1, line) {
		t.Fatalf("%d CRI lines, want %d", len(got), lines)
	}
}

// TestNoLinksFollowed: as root, the copier neither reads a console.log
// that is a link (a host secret would land in kubectl logs) nor writes its
// offset through a link.
func TestNoLinksFollowed(t *testing.T) {
	v := newVM(t)
	secret := filepath.Join(t.TempDir(), "kubelet.key")
	if err := os.WriteFile(secret, []byte("BEGIN PRIVATE KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, v.src); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(v.dir, offsetFileName+".tmp")); err != nil {
		t.Fatal(err)
	}
	cp := copierOf(t, v)
	cp.copy(true)
	if got := readCRI(t, v.dst); len(got) != 0 {
		t.Fatalf("a linked console.log was copied: %q", got)
	}
	os.Remove(v.src)
	appendTo(t, v.src, "real console\n")
	cp.copy(true)
	if b, _ := os.ReadFile(victim); string(b) != "root's file\n" {
		t.Fatalf("the offset was written through a link: the victim holds %q", b)
	}
	wantEntries(t, readCRI(t, v.dst), entry{"F", "real console"})
}

// heapPeak samples the heap in use until stop, which returns its peak.
func heapPeak() (*uint64, func() uint64) {
	var peak uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return &peak, func() uint64 { close(done); <-finished; return peak }
}
