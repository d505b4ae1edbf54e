package vmimage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCacheIsRootOnly (issue 13, defect 11): a tenant's image files are
// private: the cache and its entries can be traversed, not listed, and
// no file of an entry can be read by anyone but root (qemu gets the ones
// its VM boots from libvirt, for the VM's life).
func TestCacheIsRootOnly(t *testing.T) {
	store := newFakeStore()
	im := vmImage(t, qcow2Image(nil))
	store.put("docker.io/library/vm:latest", im)
	dir := filepath.Join(t.TempDir(), "images")
	r := NewReader(store, store, dir)
	l, err := r.Prepare(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Dir(l.Disk.Path)
	for _, d := range []string{dir, entry} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o711 {
			t.Errorf("%s: %v %v, want 0711", d, fi.Mode().Perm(), err)
		}
	}
	files, err := os.ReadDir(entry)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		fi, err := f.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, readable beyond root", f.Name(), fi.Mode().Perm())
		}
	}
}
