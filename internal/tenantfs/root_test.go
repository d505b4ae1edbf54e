package tenantfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// both runs a test with openat2, and with the walk kernels without it
// take.
func both(t *testing.T, test func(t *testing.T)) {
	t.Run("openat2", test)
	t.Run("walk", func(t *testing.T) {
		openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
		t.Cleanup(func() { openat2 = unix.Openat2 })
		test(t)
	})
}

// volume is a tenant's volume: a directory holding a file, a
// subdirectory holding one, links in and out of it, and a host file
// outside it (the canary: the links' target).
type volume struct {
	dir, host string
	hostData  []byte
}

func newVolume(t *testing.T) *volume {
	t.Helper()
	v := &volume{dir: t.TempDir(), host: filepath.Join(t.TempDir(), "host-file"), hostData: []byte("the node's file\n")}
	write(t, v.host, v.hostData)
	write(t, filepath.Join(v.dir, "file"), []byte("tenant file"))
	if err := os.Mkdir(filepath.Join(v.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(v.dir, "sub", "file"), []byte("tenant sub file"))
	for name, target := range map[string]string{
		"link-out":    v.host,                       // an absolute link out
		"link-in":     "file",                       // a link to the tenant's own file
		"link-dirout": filepath.Dir(v.host),         // a link to a host directory
		"link-sub":    "sub",                        // a link to the tenant's own directory
		"link-up":     "../" + filepath.Base(v.dir), // a relative link up and back
	} {
		if err := os.Symlink(target, filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// checkHost fails the test unless the host file is as it was made.
func (v *volume) checkHost(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(v.host)
	if err != nil || !bytes.Equal(got, v.hostData) {
		t.Fatalf("the host file outside the volume changed: %q, %v", got, err)
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func openRoot(t *testing.T, dir string) *Root {
	t.Helper()
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestOpenRoot(t *testing.T) {
	v := newVolume(t)
	if _, err := OpenRoot(filepath.Join(v.dir, "link-sub")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a link as the volume's directory: %v", err)
	}
	if _, err := OpenRoot(filepath.Join(v.dir, "file")); err == nil {
		t.Fatal("a file as the volume's directory")
	}
	if _, err := OpenRoot(filepath.Join(v.dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no directory: %v", err)
	}
	// Its parents are the node's, and are followed.
	r := openRoot(t, filepath.Join(v.dir, "link-sub")+"/")
	if r.Dir() == "" {
		t.Fatal("no Dir")
	}
	r.Close()
	if _, err := r.Open("file", os.O_RDONLY); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("open after Close: %v", err)
	}
}

func TestOpen(t *testing.T) {
	both(t, func(t *testing.T) {
		v := newVolume(t)
		r := openRoot(t, v.dir)
		for _, name := range []string{"file", "sub/file", "./sub/../file", "sub/./file"} {
			f, err := r.Open(name, os.O_RDONLY)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b, _ := io.ReadAll(f)
			f.Close()
			if !strings.HasPrefix(string(b), "tenant") {
				t.Fatalf("%s read %q", name, b)
			}
		}
		f, err := r.Open("file", os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("TENANT"), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if b, _ := os.ReadFile(filepath.Join(v.dir, "file")); string(b) != "TENANT file" {
			t.Fatalf("written through the descriptor: %q", b)
		}

		refused := map[string]unix.Errno{
			"link-out":                             unix.ELOOP, // a link at the end, out
			"link-in":                              unix.ELOOP, // a link at the end, even inside
			"link-dirout/" + filepath.Base(v.host): unix.ELOOP, // a link in the middle, out
			"link-sub/file":                        unix.ELOOP, // a link in the middle, inside
			"link-up/file":                         unix.ELOOP,
			"../" + filepath.Base(v.dir) + "/file": unix.EXDEV, // ".." out and back
			"sub/../../x":                          unix.EXDEV,
			v.host:                                 unix.EXDEV, // absolute
			"none":                                 unix.ENOENT,
			"file/x":                               unix.ENOTDIR,
		}
		for name, want := range refused {
			f, err := r.Open(name, os.O_RDWR)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, want) {
				t.Errorf("open %s: %v, want %v", name, err, want)
			}
		}
		if _, err := r.Open("none", os.O_RDONLY); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("not there: %v, want fs.ErrNotExist", err)
		}
		if _, err := r.Open("link-out", os.O_RDONLY); err == nil || !strings.Contains(err.Error(), "not followed") {
			t.Errorf("a link's refusal says why: %v", err)
		}
		if _, err := r.Open("file", os.O_RDWR|os.O_TRUNC); err == nil {
			t.Error("O_TRUNC taken")
		}
		if _, err := r.Open("sub", os.O_RDONLY); err == nil || !strings.Contains(err.Error(), "a directory, not a regular file") {
			t.Errorf("a directory: %v", err)
		}
		if _, err := r.Open(".", os.O_RDONLY); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("the volume itself: %v", err)
		}
		v.checkHost(t)
	})
}

// A FIFO is refused, not waited on (no writer ever opens it).
func TestOpenFIFO(t *testing.T) {
	both(t, func(t *testing.T) {
		v := newVolume(t)
		if err := unix.Mkfifo(filepath.Join(v.dir, "fifo"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := openRoot(t, v.dir)
		done := make(chan error, 1)
		go func() {
			_, err := r.Open("fifo", os.O_RDONLY)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "a FIFO, not a regular file") {
				t.Fatalf("a FIFO: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("opening a FIFO waited for a writer")
		}
	})
}

func TestCreate(t *testing.T) {
	both(t, func(t *testing.T) {
		v := newVolume(t)
		r := openRoot(t, v.dir)
		for _, name := range []string{"new", "sub/new"} {
			f, err := r.Create(name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, err := f.Write([]byte("new")); err != nil {
				t.Fatal(err)
			}
			f.Close()
			fi, err := os.Lstat(filepath.Join(v.dir, name))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&^0o600 != 0 {
				t.Fatalf("%s: %v, %v", name, fi, err)
			}
		}
		dangling := filepath.Join(t.TempDir(), "made-by-a-link")
		if err := os.Symlink(dangling, filepath.Join(v.dir, "link-dangling")); err != nil {
			t.Fatal(err)
		}
		refused := map[string]unix.Errno{
			"file":          unix.EEXIST, // O_EXCL: there already
			"new":           unix.EEXIST,
			"link-out":      unix.EEXIST, // a link there: not followed
			"link-dangling": unix.EEXIST, // nor made through
			"link-sub/x":    unix.ELOOP,  // a link in the middle
			"link-dirout/x": unix.ELOOP,
			"../x":          unix.EXDEV,
			"none/x":        unix.ENOENT,
		}
		for name, want := range refused {
			f, err := r.Create(name)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, want) {
				t.Errorf("create %s: %v, want %v", name, err, want)
			}
		}
		if _, err := r.Create("file"); !errors.Is(err, fs.ErrExist) {
			t.Errorf("there already: %v, want fs.ErrExist", err)
		}
		if _, err := os.Lstat(dangling); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a file was made through a dangling link: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(v.host), "x")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a file was made outside the volume: %v", err)
		}
		v.checkHost(t)
	})
}

func TestRemove(t *testing.T) {
	both(t, func(t *testing.T) {
		v := newVolume(t)
		r := openRoot(t, v.dir)
		// A link is removed itself; its target, out of the volume or in
		// it, stays.
		for _, name := range []string{"link-out", "link-in", "link-sub", "link-dirout"} {
			if err := r.Remove(name); err != nil {
				t.Fatalf("remove %s: %v", name, err)
			}
			if _, err := os.Lstat(filepath.Join(v.dir, name)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s still there: %v", name, err)
			}
		}
		v.checkHost(t)
		if b, err := os.ReadFile(filepath.Join(v.dir, "file")); err != nil || string(b) != "tenant file" {
			t.Fatalf("a link's target in the volume: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(v.dir, "sub", "file")); err != nil {
			t.Fatal(err)
		}
		if err := r.Remove("sub/file"); err != nil {
			t.Fatal(err)
		}
		if err := r.Remove("file"); err != nil {
			t.Fatal(err)
		}
		if err := r.Remove("file"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("remove what is not there: %v", err)
		}
		// A link in the middle: nothing is removed through it.
		if err := os.Symlink(filepath.Dir(v.host), filepath.Join(v.dir, "link-dirout")); err != nil {
			t.Fatal(err)
		}
		if err := r.Remove("link-dirout/" + filepath.Base(v.host)); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			t.Fatalf("remove through a link in the middle: %v", err)
		}
		for _, name := range []string{"../" + filepath.Base(v.dir) + "/sub", "sub/../..", v.host, "..", "."} {
			if err := r.Remove(name); err == nil {
				t.Fatalf("remove %s: nil", name)
			}
		}
		if err := r.Remove("sub"); err == nil {
			t.Fatal("a directory removed")
		}
		v.checkHost(t)
	})
}

// A mount point in the volume is not crossed (the node's mounts are not
// the tenant's files).
func TestMountPointRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (mount)")
	}
	both(t, func(t *testing.T) {
		v := newVolume(t)
		mnt := filepath.Join(v.dir, "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Skipf("mount a tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		write(t, filepath.Join(mnt, "f"), []byte("node"))
		r := openRoot(t, v.dir)
		if _, err := r.Open("mnt/f", os.O_RDWR); !errors.Is(err, unix.EXDEV) {
			t.Fatalf("open across a mount point: %v", err)
		}
		if _, err := r.Create("mnt/g"); !errors.Is(err, unix.EXDEV) {
			t.Fatalf("create across a mount point: %v", err)
		}
		if err := r.Remove("mnt/f"); !errors.Is(err, unix.EXDEV) {
			t.Fatalf("remove across a mount point: %v", err)
		}
	})
}

// A child process reaches the file at /dev/fd/N, whatever the name in
// the volume has become since.
func TestChildFiles(t *testing.T) {
	v := newVolume(t)
	r := openRoot(t, v.dir)
	in, err := r.Open("file", os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := r.Create("out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The names change under the child: it is not told them.
	if err := r.Remove("file"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("out"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v.host, filepath.Join(v.dir, "out")); err != nil {
		t.Fatal(err)
	}
	extra, paths := ChildFiles(in, out)
	if len(extra) != 2 || paths[0] != "/dev/fd/3" || paths[1] != "/dev/fd/4" {
		t.Fatalf("ChildFiles: %v, %v", extra, paths)
	}
	cmd := exec.Command("sh", "-c", `cat "$1" > "$2"`, "sh", paths[0], paths[1])
	cmd.ExtraFiles = extra
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	b, err := io.ReadAll(io.NewSectionReader(out, 0, 1<<10))
	if err != nil || string(b) != "tenant file" {
		t.Fatalf("the child wrote %q, %v", b, err)
	}
	v.checkHost(t)
}
