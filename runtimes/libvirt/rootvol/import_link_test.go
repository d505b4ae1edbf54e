package rootvol

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
)

// canary is a host file outside the volume that an import must never
// write: its path and content.
func canary(t *testing.T) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host-file")
	content := []byte("root:the node's own file, not the tenant's\n")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, content
}

// checkCanary fails the test unless the canary is as it was made.
func checkCanary(t *testing.T, p string, want []byte) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("the host file: %v", err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || !bytes.Equal(got, want) {
		t.Fatalf("the import wrote the host file outside the volume: %s, %d bytes, starting %q", fi.Mode(), len(got), got[:min(len(got), 16)])
	}
}

// checkNotThroughLink: Import either failed, saying so, or left a real
// disk in the volume (a regular file, not a link) that Examine takes.
func checkNotThroughLink(t *testing.T, v *vm.RootVolume, importErr error) {
	t.Helper()
	if importErr != nil {
		if !strings.Contains(importErr.Error(), v.DiskFile()) {
			t.Fatalf("Import failed without naming the disk file: %v", importErr)
		}
		t.Logf("Import refused: %v", importErr)
		return
	}
	fi, err := os.Lstat(DiskPath(v))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("Import succeeded, and the volume's disk is %v, %v", fi, err)
	}
	if c, err := examine(t, v); err != nil || c.Holds != Disk {
		t.Fatalf("Import succeeded, and the volume holds %+v, %v", c, err)
	}
}

// A re-import into a qcow2 volume unlinks the old disk file and creates
// a new one: a link the tenant plants in between (another pod on the
// same volume) must not be written through.
func TestImportQcow2LinkPlantedAfterRemove(t *testing.T) {
	needTool(t, "qemu-img")
	src := sourceDisk(t)
	v := fsVolume(t, vm.FormatQcow2)
	hostFile, content := canary(t)
	// An import cut short: the disk file is there and is imported again.
	if err := os.WriteFile(DiskPath(v), []byte("QFI\xfbunfinished"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := false
	afterRemove = func() {
		if err := os.Symlink(hostFile, DiskPath(v)); err != nil {
			t.Errorf("plant the link: %v", err)
		}
		planted = true
	}
	t.Cleanup(func() { afterRemove = nil })
	err := Import(context.Background(), v, src, 16<<20, nil)
	if !planted {
		t.Fatal("the test hook did not run: Import no longer unlinks the old disk file there")
	}
	checkCanary(t, hostFile, content)
	checkNotThroughLink(t, v, err)
}

// A raw import into a filesystem volume must not follow a link the
// tenant left as the disk file.
func TestImportRawLinkAsDisk(t *testing.T) {
	needTool(t, "qemu-img")
	src := sourceDisk(t)
	v := fsVolume(t, vm.FormatRaw)
	hostFile, content := canary(t)
	if err := os.Symlink(hostFile, DiskPath(v)); err != nil {
		t.Fatal(err)
	}
	err := Import(context.Background(), v, src, 16<<20, nil)
	checkCanary(t, hostFile, content)
	checkNotThroughLink(t, v, err)
	if err == nil {
		t.Fatal("Import wrote over a link left as the disk file")
	}
}

// markImporting sets or clears the import mark of the disk file at path
// (tests: a disk whose import was cut short).
func markImporting(path string, on bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return setImportMark(f, on)
}

// Importing into a filesystem volume again, over an import cut short,
// writes a fresh disk through the descriptor crimux opened.
func TestImportFileVolumeAgain(t *testing.T) {
	needTool(t, "qemu-img")
	src := sourceDisk(t)
	for _, format := range []string{vm.FormatQcow2, vm.FormatRaw} {
		t.Run(format, func(t *testing.T) {
			v := fsVolume(t, format)
			for i := range 2 {
				if err := Import(context.Background(), v, src, 16<<20, nil); err != nil {
					t.Fatalf("import %d: %v", i, err)
				}
				c, err := examine(t, v)
				if err != nil || c.Holds != Disk || c.VirtualSize != 16<<20 {
					t.Fatalf("after import %d: %+v, %v", i, c, err)
				}
				sh(t, "qemu-img", "compare", "-f", "qcow2", "-F", format, src.Path, DiskPath(v))
				fi, err := os.Lstat(DiskPath(v))
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
					t.Fatalf("the disk file: %v, %v", fi, err)
				}
				// Cut short: the next import starts over.
				if format == vm.FormatQcow2 {
					if err := markImporting(DiskPath(v), true); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(DiskPath(v), bytes.Repeat([]byte{0xee}, 20<<20), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
