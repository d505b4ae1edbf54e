package fsusage

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// allocated is what path takes on disk, from the kernel.
func allocated(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

func write(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMeasure(t *testing.T) {
	base := t.TempDir()
	cache, vms := filepath.Join(base, "images"), filepath.Join(base, "vms")
	write(t, filepath.Join(cache, "e1", "disk.qcow2"), 1<<20)
	write(t, filepath.Join(vms, "v1", "console.log"), 4096)
	// A sparse file counts what it holds, not its size.
	sparse := filepath.Join(vms, "v1", "disk.qcow2")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A hard link across the two roots counts once; a symlink is not
	// followed.
	if err := os.Link(filepath.Join(cache, "e1", "disk.qcow2"), filepath.Join(vms, "v1", "link")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "big")
	write(t, outside, 4<<20)
	if err := os.Symlink(outside, filepath.Join(vms, "v1", "kernel")); err != nil {
		t.Fatal(err)
	}

	var want Usage
	for _, p := range []string{cache, filepath.Join(cache, "e1"), filepath.Join(cache, "e1", "disk.qcow2"),
		vms, filepath.Join(vms, "v1"), filepath.Join(vms, "v1", "console.log"), sparse, filepath.Join(vms, "v1", "kernel")} {
		want.Bytes += allocated(t, p)
		want.Inodes++
	}
	got, err := Measure(context.Background(), cache, vms, filepath.Join(base, "pods")) // pods/ does not exist
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Measure = %+v, want %+v", got, want)
	}
	if got.Bytes >= 1<<30 {
		t.Fatalf("Measure counted the sparse file's size: %d bytes", got.Bytes)
	}
	if again, _ := Measure(context.Background(), cache, cache); again.Inodes != 3 {
		t.Fatalf("a root given twice counted %d inodes, want 3", again.Inodes)
	}
}

func TestMeasureCanceled(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "f"), 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, dir); err == nil {
		t.Fatal("Measure with a canceled context succeeded")
	}
}

func TestSameFilesystem(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"two directories of one filesystem", a, b, true},
		{"another filesystem", a, "/proc", false},
		{"a path that does not exist", a, filepath.Join(a, "missing"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SameFilesystem(tt.a, tt.b); got != tt.want {
				t.Fatalf("SameFilesystem(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
