package hostcaps

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenLibvirtDirs: every directory there is let traversed by others
// (o+x added, nothing else changed); one that is not there is left to
// libvirt.
func TestOpenLibvirtDirs(t *testing.T) {
	dir := t.TempDir()
	closed, open := filepath.Join(dir, "qemu"), filepath.Join(dir, "channel")
	for d, mode := range map[string]os.FileMode{closed: 0o750, open: 0o751} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := OpenLibvirtDirs([]string{closed, filepath.Join(dir, "none"), open}); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]os.FileMode{closed: 0o751, open: 0o751} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want %v", filepath.Base(d), fi.Mode().Perm(), err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("a directory not there was made: %v", err)
	}
}
