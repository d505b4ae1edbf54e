package vmimage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCacheIsRootOnly: the cache and its entries can be traversed, not
// listed; the record is root's alone; an image's files are root's and
// read-only for all, since VMs of many identities read one disk and none
// may write it (libvirt does not lend it by chowning it to one qemu user).
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
		want := os.FileMode(sharedFileMode)
		if f.Name() == recordFile {
			want = 0o400
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", f.Name(), fi.Mode().Perm(), want)
		}
	}
}
