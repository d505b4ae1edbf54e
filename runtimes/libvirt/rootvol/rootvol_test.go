package rootvol

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
)

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sourceDisk is an 8 MiB qcow2 with a pattern in its first MiB and at 4 MiB.
func sourceDisk(t *testing.T) Source {
	needTool(t, "qemu-io")
	p := filepath.Join(t.TempDir(), "src.qcow2")
	sh(t, "qemu-img", "create", "-q", "-f", "qcow2", p, "8M")
	sh(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 1M", "-c", "write -P 0xcd 4M 64k", p)
	return Source{Path: p, Format: "qcow2", VirtualSize: 8 << 20}
}

func fsVolume(t *testing.T, format string) *vm.RootVolume {
	return &vm.RootVolume{ContainerPath: "/data", HostPath: t.TempDir(), Format: format, Field: "config.mounts[0]"}
}

func examine(t *testing.T, v *vm.RootVolume) (Content, error) {
	t.Helper()
	capacity, err := Capacity(v)
	if err != nil {
		t.Fatal(err)
	}
	return Examine(v, capacity)
}

func TestExamineFilesystemVolume(t *testing.T) {
	needTool(t, "qemu-img")
	v := fsVolume(t, vm.FormatQcow2)
	if c, err := examine(t, v); err != nil || c.Holds != Nothing {
		t.Fatalf("no disk file: %+v, %v", c, err)
	}
	disk := DiskPath(v)
	if err := os.WriteFile(disk, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := examine(t, v); err != nil || c.Holds != Nothing {
		t.Fatalf("zeros: %+v, %v", c, err)
	}
	data := bytes.Repeat([]byte("data"), 1<<18)
	if err := os.WriteFile(disk, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := examine(t, v); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not a qcow2 disk") {
		t.Fatalf("data as qcow2: %v", err)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, data) {
		t.Fatal("examining changed the volume")
	}
	raw := &vm.RootVolume{ContainerPath: v.ContainerPath, HostPath: v.HostPath, Format: vm.FormatRaw, Field: v.Field}
	if err := os.WriteFile(DiskPath(raw), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := examine(t, raw); err != nil || c.Holds != Disk || c.VirtualSize != int64(len(data)) {
		t.Fatalf("raw data as raw: %+v, %v", c, err)
	}
	os.Remove(disk)
	sh(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/etc/passwd", "-u", disk, "16M")
	if _, err := examine(t, v); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "backing file") ||
		!strings.Contains(err.Error(), "/data") {
		t.Fatalf("a qcow2 naming a backing file: %v", err)
	}
	os.Remove(disk)
	if err := os.Symlink("/etc/shadow", disk); err != nil {
		t.Fatal(err)
	}
	if _, err := examine(t, v); err == nil || !strings.Contains(err.Error(), "symbolic link") && !strings.Contains(err.Error(), "too many levels") {
		t.Fatalf("a link as the disk: %v", err)
	}
}

func TestImportQcow2(t *testing.T) {
	src := sourceDisk(t)
	v := fsVolume(t, vm.FormatQcow2)
	var pcts []float64
	if err := Import(context.Background(), v, src, 16<<20, func(p float64) { pcts = append(pcts, p) }); err != nil {
		t.Fatal(err)
	}
	if len(pcts) == 0 || pcts[len(pcts)-1] != 100 {
		t.Fatalf("progress %v, want it to end at 100", pcts)
	}
	c, err := examine(t, v)
	if err != nil || c.Holds != Disk || c.VirtualSize != 16<<20 {
		t.Fatalf("after import: %+v, %v", c, err)
	}
	sh(t, "qemu-img", "compare", "-f", "qcow2", "-F", "qcow2", src.Path, DiskPath(v))

	// Marked as under way: an import cut short.
	if err := markImporting(DiskPath(v), true); err != nil {
		t.Fatal(err)
	}
	if c, err := examine(t, v); err != nil || c.Holds != Unfinished {
		t.Fatalf("marked: %+v, %v", c, err)
	}
	// qemu keeps the mark through a write (as qemu-img convert -n does).
	sh(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x11 2M 64k", DiskPath(v))
	if c, err := examine(t, v); err != nil || c.Holds != Unfinished {
		t.Fatalf("marked, after qemu wrote: %+v, %v", c, err)
	}
}

func TestDiskSize(t *testing.T) {
	v := &vm.RootVolume{ContainerPath: "/dev/xvda", Format: vm.FormatQcow2, Field: "config.devices[0]"}
	src := Source{VirtualSize: 900 << 20}
	if n, err := DiskSize(v, 1<<30, src); err != nil || n != (1<<30-Reserve(1<<30))&^(1<<20-1) {
		t.Fatalf("1 GiB volume: %d, %v", n, err)
	}
	if _, err := DiskSize(v, 512<<20, src); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/dev/xvda") {
		t.Fatalf("a volume smaller than the image: %v", err)
	}
	v.Size = 2 << 30
	if _, err := DiskSize(v, 1<<30, src); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a size past the volume: %v", err)
	}
	v.Size, v.Format = 1<<30, vm.FormatRaw
	if n, err := DiskSize(v, 1<<30, src); err != nil || n != 1<<30 {
		t.Fatalf("raw of the whole volume: %d, %v", n, err)
	}
}

// loopDevice attaches a file of size bytes to a loop device (root only).
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (losetup)")
	}
	f := filepath.Join(t.TempDir(), "vol.img")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, size); err != nil {
		t.Fatal(err)
	}
	dev := strings.TrimSpace(sh(t, "losetup", "-f", "--show", f))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

func TestImportBlockAndAttach(t *testing.T) {
	src := sourceDisk(t)
	for _, format := range []string{vm.FormatQcow2, vm.FormatRaw} {
		t.Run(format, func(t *testing.T) {
			dev := loopDevice(t, 32<<20)
			v := &vm.RootVolume{ContainerPath: "/dev/xvda", HostPath: dev, Block: true, Format: format, Field: "config.devices[0]"}
			if c, err := examine(t, v); err != nil || c.Holds != Nothing {
				t.Fatalf("empty device: %+v, %v", c, err)
			}
			capacity, _ := Capacity(v)
			size, err := DiskSize(v, capacity, src)
			if err != nil {
				t.Fatal(err)
			}
			if err := Import(context.Background(), v, src, size, nil); err != nil {
				t.Fatal(err)
			}
			if c, err := examine(t, v); err != nil || c.Holds != Disk {
				t.Fatalf("after import: %+v, %v", c, err)
			}
			sh(t, "qemu-img", "compare", "-f", "qcow2", "-F", format, src.Path, dev)
			dir := t.TempDir()
			p, err := Attach(v, dir, &Owner{UID: 4242, GID: 4243})
			if err != nil {
				t.Fatal(err)
			}
			var st, host unix.Stat_t
			if err := unix.Stat(p, &st); err != nil || unix.Stat(dev, &host) != nil {
				t.Fatal(err)
			}
			if st.Rdev != host.Rdev || st.Uid != 4242 || st.Gid != 4243 || st.Mode&0o777 != 0o600 || host.Uid != 0 {
				t.Fatalf("node %+v, host's %+v", st, host)
			}
			if err := Release(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("node left: %v", err)
			}
		})
	}
}

func TestAttachFileVolume(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (mount)")
	}
	v := fsVolume(t, vm.FormatQcow2)
	if err := os.WriteFile(DiskPath(v), []byte("disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := Attach(v, dir, &Owner{UID: 4242, GID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	var st, at unix.Stat_t
	if err := unix.Stat(DiskPath(v), &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o644 {
		t.Fatalf("the volume's disk: %+v, %v", st, err)
	}
	if err := unix.Stat(p, &at); err != nil || at.Uid != 4242 || at.Ino != st.Ino {
		t.Fatalf("the attachment: %+v, %v", at, err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "disk" {
		t.Fatalf("through the mount: %q, %v", b, err)
	}
	if err := Release(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatalf("the VM dir after Release: %v", err)
	}
	if b, err := os.ReadFile(DiskPath(v)); err != nil || string(b) != "disk" {
		t.Fatalf("the volume's disk after Release: %q, %v", b, err)
	}
}
