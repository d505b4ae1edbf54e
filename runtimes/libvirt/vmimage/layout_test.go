package vmimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestExtractLayout(t *testing.T) {
	qcow := qcow2Image(nil)
	backed := qcow2Image(func(b []byte) {
		copy(b[0x200:], "/dev/sda")
		b[8+7], b[8+6] = 0x00, 0x02 // backing_file_offset 0x200
		b[19] = 8                   // backing_file_size
	})
	raw := []byte("raw disk bytes")
	kernel, initrd := []byte("bzImage"), []byte("cpio")

	tests := []struct {
		name    string
		layers  [][]byte
		maxDisk int64
		want    map[string][]byte // files written, by name
		format  string
		wantErr string
	}{{
		name:   "single qcow2 disk",
		layers: [][]byte{layer(t, dir("disk/"), file("disk/vm.qcow2", qcow))},
		want:   map[string][]byte{"disk.qcow2": qcow},
		format: FormatQcow2,
	}, {
		name:   "raw disk without a directory entry",
		layers: [][]byte{layer(t, file("./disk/vm.img", raw))},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name:   "kernel and initrd",
		layers: [][]byte{layer(t, file("boot/vmlinuz", kernel), file("boot/initrd.img", initrd))},
		want:   map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd},
	}, {
		name:   "kernel without initrd",
		layers: [][]byte{layer(t, file("boot/vmlinuz", kernel))},
		want:   map[string][]byte{"vmlinuz": kernel},
	}, {
		name: "disk and kernel in two layers",
		layers: [][]byte{
			layer(t, file("boot/vmlinuz", kernel), file("boot/initrd.img", initrd)),
			layer(t, file("disk/a.raw", raw)),
		},
		want:   map[string][]byte{"disk.raw": raw, "vmlinuz": kernel, "initrd.img": initrd},
		format: FormatRaw,
	}, {
		name:    "two disks",
		layers:  [][]byte{layer(t, file("disk/b.raw", raw), file("disk/a.qcow2", qcow))},
		wantErr: "/disk/: holds 2 files, want exactly one disk: /disk/a.qcow2, /disk/b.raw",
	}, {
		name:    "neither disk nor kernel",
		layers:  [][]byte{layer(t, text("etc/hostname", "vm"), dir("disk/"))},
		wantErr: "has neither a disk under /disk/ nor a kernel at /boot/vmlinuz",
	}, {
		name:    "initrd without kernel",
		layers:  [][]byte{layer(t, file("disk/a.raw", raw), file("boot/initrd.img", initrd))},
		wantErr: "/boot/initrd.img: an initrd without a kernel at /boot/vmlinuz",
	}, {
		name: "whiteout deletes a disk in an upper layer",
		layers: [][]byte{
			layer(t, file("disk/a.raw", raw), file("disk/b.qcow2", qcow)),
			layer(t, whiteout("disk", "b.qcow2")),
		},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name: "whiteout of the disk directory, new disk above",
		layers: [][]byte{
			layer(t, file("disk/a.raw", raw), file("disk/b.raw", raw)),
			layer(t, whiteout("", "disk")),
			layer(t, file("disk/c.qcow2", qcow)),
		},
		want:   map[string][]byte{"disk.qcow2": qcow},
		format: FormatQcow2,
	}, {
		name: "whiteout hides lower layers only, whatever the entry order",
		layers: [][]byte{
			layer(t, file("disk/a.raw", raw)),
			layer(t, file("disk/a.raw", qcow), whiteout("disk", "a.raw")),
		},
		want:   map[string][]byte{"disk.qcow2": qcow},
		format: FormatQcow2,
	}, {
		name: "opaque directory",
		layers: [][]byte{
			layer(t, file("disk/old.raw", raw), file("boot/vmlinuz", kernel)),
			layer(t, dir("disk/"), file("disk/new.qcow2", qcow), opaque("disk")),
		},
		want:   map[string][]byte{"disk.qcow2": qcow, "vmlinuz": kernel},
		format: FormatQcow2,
	}, {
		name: "file replaces a lower directory",
		layers: [][]byte{
			layer(t, file("boot/vmlinuz/x", kernel), file("disk/a.raw", raw)),
			layer(t, file("boot/vmlinuz", kernel)),
		},
		want:   map[string][]byte{"disk.raw": raw, "vmlinuz": kernel},
		format: FormatRaw,
	}, {
		name:   "relative symlink inside the root is followed",
		layers: [][]byte{layer(t, file("images/vm.raw", raw), symlink("disk/vm.raw", "../images/./vm.raw"))},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name: "absolute symlink is followed relative to the root",
		layers: [][]byte{layer(t,
			file("usr/lib/kernels/vmlinuz-6.1", kernel),
			symlink("boot/vmlinuz", "/usr/lib/kernels/vmlinuz-6.1"),
			symlink("boot/initrd.img", "/../../boot/../usr/lib/kernels/nope"),
		)},
		wantErr: `/boot/initrd.img: symlink /boot/initrd.img -> "/../../boot/../usr/lib/kernels/nope" leaves the image root`,
	}, {
		name: "absolute symlinks, directory symlink",
		layers: [][]byte{layer(t,
			file("usr/lib/kernels/vmlinuz-6.1", kernel),
			symlink("boot", "/usr/lib/kernels"),
			symlink("usr/lib/kernels/vmlinuz", "vmlinuz-6.1"),
			symlink("disk", "/var/disks"),
			file("var/disks/root.img", raw),
		)},
		want:   map[string][]byte{"disk.raw": raw, "vmlinuz": kernel},
		format: FormatRaw,
	}, {
		name:    "symlink escaping with ../../.. is rejected",
		layers:  [][]byte{layer(t, symlink("disk/vm.raw", "../../../etc/shadow"))},
		wantErr: `/disk/vm.raw: symlink /disk/vm.raw -> "../../../etc/shadow" leaves the image root`,
	}, {
		name:    "symlink loop is rejected",
		layers:  [][]byte{layer(t, symlink("boot/vmlinuz", "a"), symlink("boot/a", "b"), symlink("boot/b", "/boot/vmlinuz"))},
		wantErr: "/boot/vmlinuz: too many levels of symbolic links (more than 40)",
	}, {
		name:    "dangling symlink",
		layers:  [][]byte{layer(t, symlink("boot/vmlinuz", "vmlinuz-6.1"))},
		wantErr: `/boot/vmlinuz: symlink to "vmlinuz-6.1", which is not in the image`,
	}, {
		name: "hard link into /disk/ from a lower layer",
		layers: [][]byte{
			layer(t, file("images/vm.qcow2", qcow)),
			layer(t, hardlink("disk/vm.qcow2", "images/vm.qcow2"), whiteout("", "images")),
		},
		want:   map[string][]byte{"disk.qcow2": qcow},
		format: FormatQcow2,
	}, {
		name:   "kernel and initrd are hard links of one file",
		layers: [][]byte{layer(t, file("boot/vmlinuz", kernel), hardlink("boot/initrd.img", "boot/vmlinuz"))},
		want:   map[string][]byte{"vmlinuz": kernel, "initrd.img": kernel},
	}, {
		name:    "hard link to a missing file",
		layers:  [][]byte{layer(t, hardlink("disk/vm.raw", "images/vm.raw"))},
		wantErr: `layer 0: hard link "disk/vm.raw" -> "images/vm.raw": target not in the image`,
	}, {
		name:    "directory under /disk/",
		layers:  [][]byte{layer(t, file("disk/a.raw", raw), dir("disk/more/"))},
		wantErr: "/disk/more: is a directory, not a regular file",
	}, {
		name:    "device under /disk/",
		layers:  [][]byte{layer(t, device("disk/sda"))},
		wantErr: "/disk/sda: is a device or special file, not a regular file",
	}, {
		name:    "symlink to a host device path stays in the image",
		layers:  [][]byte{layer(t, symlink("disk/sda", "/dev/sda"), device("dev/sda"))},
		wantErr: "/disk/sda (/dev/sda): is a device or special file, not a regular file",
	}, {
		name:    "/disk is a file",
		layers:  [][]byte{layer(t, file("disk", raw))},
		wantErr: "/disk/: is a regular file, not a directory",
	}, {
		name:    "empty disk",
		layers:  [][]byte{layer(t, file("disk/a.raw", nil))},
		wantErr: "/disk/a.raw: is empty",
	}, {
		name:    "disk above the size limit",
		layers:  [][]byte{layer(t, file("disk/a.raw", raw))},
		maxDisk: 4,
		wantErr: "/disk/a.raw: is 14 bytes, more than the limit of 4",
	}, {
		name:    "qcow2 with a backing file",
		layers:  [][]byte{layer(t, file("disk/a.qcow2", backed))},
		wantErr: `/disk/a.qcow2: qcow2 names a backing file "/dev/sda"`,
	}, {
		name:    "tar entry climbing out of the root",
		layers:  [][]byte{layer(t, file("disk/../../a.raw", raw))},
		wantErr: `layer 0: entry "disk/../../a.raw": name climbs above the image root`,
	}, {
		name:    "entry through a symlinked parent that escapes",
		layers:  [][]byte{layer(t, symlink("disk", "../host"), file("disk/a.raw", raw))},
		wantErr: `layer 0: entry "disk/a.raw": disk/: symlink /disk -> "../host" leaves the image root`,
	}, {
		name:   "entry through a symlinked parent inside the root",
		layers: [][]byte{layer(t, symlink("disk", "data/disks"), file("disk/a.raw", raw))},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name:    "entry under a regular file",
		layers:  [][]byte{layer(t, file("disk", raw), file("disk/a.raw", raw))},
		wantErr: `layer 0: entry "disk/a.raw": parent /disk is a regular file`,
	}, {
		// The top layer's files are copied as it is indexed; the picks
		// decide which copies are used, and no other is left behind.
		name:   "top-layer disk written twice: the later entry wins",
		layers: [][]byte{layer(t, file("disk/a.raw", []byte("first")), file("disk/a.raw", raw))},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name: "top-layer disk replaced by a link to a lower layer's file",
		layers: [][]byte{
			layer(t, file("data/x.raw", raw)),
			layer(t, file("disk/a.raw", []byte("hidden")), symlink("disk/a.raw", "../data/x.raw")),
		},
		want:   map[string][]byte{"disk.raw": raw},
		format: FormatRaw,
	}, {
		name:   "initrd hard-linked to the kernel",
		layers: [][]byte{layer(t, file("boot/vmlinuz", kernel), hardlink("boot/initrd.img", "boot/vmlinuz"))},
		want:   map[string][]byte{"vmlinuz": kernel, "initrd.img": kernel},
	}, {
		name:    "truncated tar",
		layers:  [][]byte{layer(t, file("disk/a.raw", raw))[:520]},
		wantErr: "layer 0: ",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			maxDisk := tt.maxDisk
			if maxDisk == 0 {
				maxDisk = DefaultMaxDiskSize
			}
			got, err := extract(context.Background(), len(tt.layers), memLayers(tt.layers), dir, extractOpts{maxDisk: maxDisk, maxBoot: maxBootFileSize})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, does not wrap ErrInvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.DiskFormat != tt.format {
				t.Errorf("format = %q, want %q", got.DiskFormat, tt.format)
			}
			checkDir(t, dir, tt.want)
			for _, name := range []string{got.Disk, got.Kernel, got.Initrd} {
				if _, ok := tt.want[name]; name != "" && !ok {
					t.Errorf("extracted names %q, not written", name)
				}
			}
		})
	}
}

// checkDir compares a directory's regular files with want.
func checkDir(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names, wantNames []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for n := range want {
		wantNames = append(wantNames, n)
	}
	sort.Strings(wantNames)
	if strings.Join(names, ",") != strings.Join(wantNames, ",") {
		t.Fatalf("files = %v, want %v", names, wantNames)
	}
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("%s: %d bytes, differs from the image's %d", name, len(got), len(body))
		}
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != sharedFileMode {
			t.Errorf("%s: mode %v, want read-only", name, fi.Mode())
		}
	}
}

func TestCopySparse(t *testing.T) {
	body := make([]byte, 3*sparseBlock+100)
	copy(body[sparseBlock:], "data in the second block")
	body[len(body)-1] = 1
	dest := filepath.Join(t.TempDir(), "f")
	if err := writeFile(dest, bytes.NewReader(body), int64(len(body)), true); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	if !bytes.Equal(got, body) {
		t.Fatal("content differs")
	}
	zeros := make([]byte, 5*sparseBlock)
	if err := writeFile(dest+"0", bytes.NewReader(zeros), int64(len(zeros)), true); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dest + "0"); fi.Size() != int64(len(zeros)) {
		t.Fatalf("size %d, want %d", fi.Size(), len(zeros))
	}
	if err := writeFile(dest+"short", bytes.NewReader(body[:10]), 11, true); err == nil {
		t.Fatal("a short copy succeeded")
	}
}

// TestCraftedLayersCostBoundedWork: opaque markers that each revisit a
// large directory, or symlinks that each expand to long paths, would take
// quadratic time without the step budget.
func TestCraftedLayersCostBoundedWork(t *testing.T) {
	const n = 1000
	var opaques, deep []entry
	for i := range n {
		opaques = append(opaques, text(fmt.Sprintf("d/%d", i), ""), opaque("d"))
		deep = append(deep, text(fmt.Sprintf("s/%d", i), ""))
	}
	long := strings.Repeat("x/", 1000)
	tests := map[string][]entry{
		"opaque markers": opaques,
		"deep symlink":   append([]entry{dir(long), symlink("s", long)}, deep...),
	}
	for name, es := range tests {
		t.Run(name, func(t *testing.T) {
			tr := newTree()
			tr.budget = n * n / 4
			err := tr.apply(bytes.NewReader(layer(t, es...)), 0)
			if err == nil || !strings.Contains(err.Error(), "steps") || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v, want the step budget's", err)
			}
		})
	}
}
