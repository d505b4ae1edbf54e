package vmimage

import (
	"archive/tar"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

// TestIndexMemoryIsBounded: a layer of many entries with long names is
// refused once its names pass the budget, and indexing it grows the heap
// by a bounded amount, whatever the layer holds.
func TestIndexMemoryIsBounded(t *testing.T) {
	const entries = 100_000
	pr, pw := io.Pipe()
	go func() { // streamed: the test itself holds no layer in memory
		tw := tar.NewWriter(pw)
		dir := strings.Repeat("d", 200)
		for i := 0; i < entries; i++ {
			name := fmt.Sprintf("%s/%s/f%07d", dir, strings.Repeat("n", 3700), i)
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := newTree()
	err := tr.apply(pr, 0)
	pr.Close()
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("indexed %d entries (%d bytes of names): heap grew %d MiB; %v", tr.entries, tr.nameBytes, growth>>20, err)
	if err == nil || !strings.Contains(err.Error(), "bytes of file names") {
		t.Fatalf("a layer of %d entries with ~4 KiB names was indexed (%d entries): %v", entries, tr.entries, err)
	}
	if growth > 64<<20 {
		t.Fatalf("indexing grew the heap by %d MiB, want at most 64", growth>>20)
	}
	runtime.KeepAlive(tr)
}
