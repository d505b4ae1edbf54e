package rootvol

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/converter/vm"
)

// openWatch reports how many times the file at p has been opened since
// the watch began (inotify IN_OPEN). An O_PATH descriptor, which opens
// nothing, makes no event (Linux 5.13 and later: the test is skipped on
// a kernel that reports one); a real open of a FIFO or a device does.
func openWatch(t *testing.T, p string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify_init1: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN); err != nil {
		t.Fatalf("inotify_add_watch %s: %v", p, err)
	}
	opens := func() int {
		n := 0
		buf := make([]byte, 64*unix.SizeofInotifyEvent)
		for {
			r, err := unix.Read(fd, buf)
			if err != nil || r <= 0 {
				return n
			}
			for off := 0; off+unix.SizeofInotifyEvent <= r; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				if ev.Mask&unix.IN_OPEN != 0 {
					n++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(pfd)
	if n := opens(); n != 0 {
		t.Skipf("this kernel reports an O_PATH descriptor as an open (%d events): an open cannot be told from a look", n)
	}
	return opens
}

// A disk file the tenant made a FIFO, a device node or a link is refused
// by Examine and Attach, naming the volume, without being opened: a FIFO
// is not waited on, a device's driver never sees an open, a link is not
// followed.
func TestDiskFileNotRegular(t *testing.T) {
	hostFile, content := canary(t)
	cases := []struct {
		name string
		make func(t *testing.T, p string)
		says string // what the error says the file is
		// watch: the file at the disk's name is watched for opens (a
		// link's target is the canary, checked unchanged instead).
		watch bool
	}{
		{"FIFO", func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "a FIFO", true},
		{"character device", func(t *testing.T, p string) {
			if os.Getuid() != 0 {
				t.Skip("needs root (mknod)")
			}
			if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil { // /dev/null's number
				t.Fatal(err)
			}
		}, "a character device", true},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "a directory", false},
		{"link to a host file", func(t *testing.T, p string) {
			if err := os.Symlink(hostFile, p); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := fsVolume(t, vm.FormatQcow2)
			disk := DiskPath(v)
			c.make(t, disk)
			opens := func() int { return 0 }
			if c.watch {
				opens = openWatch(t, disk)
			}
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				t.Logf("%s: %v", what, err)
				for _, want := range []string{v.ContainerPath, disk, c.says} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: the error does not say %q: %v", what, want, err)
					}
				}
				if n := opens(); n != 0 {
					t.Errorf("%s: the disk file was opened %d times", what, n)
				}
			}
			capacity, err := Capacity(v)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Examine(v, capacity)
			check("Examine", err)
			vmDir := t.TempDir()
			_, err = Attach(v, vmDir, nil)
			check("Attach", err)
			if _, err := os.Lstat(filepath.Join(vmDir, AttachName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Attach left %s: %v", AttachName, err)
			}
			checkCanary(t, hostFile, content)
		})
	}
}

// A regular disk file is examined and attached as before.
func TestDiskFileRegular(t *testing.T) {
	needTool(t, "qemu-img")
	v := fsVolume(t, vm.FormatQcow2)
	sh(t, "qemu-img", "create", "-q", "-f", "qcow2", DiskPath(v), "16M")
	if c, err := examine(t, v); err != nil || c.Holds != Disk || c.VirtualSize != 16<<20 {
		t.Fatalf("a qcow2 disk file: %+v, %v", c, err)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (mount)")
	}
	vmDir := t.TempDir()
	p, err := Attach(v, vmDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(vmDir)
	var a, b unix.Stat_t
	if err := unix.Stat(p, &a); err != nil || unix.Stat(DiskPath(v), &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
		t.Fatalf("attached %+v, the volume's disk %+v: %v", a, b, err)
	}
}
