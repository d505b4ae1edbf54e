package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/landlock"
	"github.com/crimux/crimux/runtimes/libvirt/placement"
)

// The test binary plays both parts: run with wrapperEnv set to a path it
// is the wrapper, execing that path as qemu; run through a link named
// fakeQemu it is qemu, printing its arguments and writing "hello" through
// each file an argument "…fd=<n>" names.
const (
	wrapperEnv = "CRIMUX_TEST_WRAPPER_QEMU"
	// catEnv: paths the fake qemu reads and prints, named to it only
	// here, as a header's data file would be.
	catEnv   = "CRIMUX_TEST_QEMU_CAT"
	fakeQemu = "fake-qemu"
)

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == fakeQemu {
		os.Exit(runFakeQemu(os.Args[1:]))
	}
	if q := os.Getenv(wrapperEnv); q != "" {
		qemuBinary = q
		placementWait = "5s"
		main()
	}
	os.Exit(m.Run())
}

func runFakeQemu(args []string) int {
	fmt.Printf("qemu %q\n", args)
	for _, path := range strings.Fields(os.Getenv(catEnv)) {
		b, err := os.ReadFile(path)
		fmt.Printf("cat %s: %q %v\n", path, b, err)
	}
	for _, a := range args {
		if _, fd, ok := strings.Cut(a, "fd="); ok {
			n, err := strconv.Atoi(fd)
			if err == nil {
				_, err = os.NewFile(uintptr(n), "tap").WriteString("hello")
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "fake qemu: fd %s: %v\n", fd, err)
				return 1
			}
		}
	}
	return 0
}

// socketPath is a fresh socket path, short enough for sun_path.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crimux-wr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// serveOnce answers one request with args and files, then closes them.
func serveOnce(t *testing.T, sock string, args []string, files ...*os.File) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Error(err)
			return
		}
		if args == nil {
			_, _ = io.WriteString(c, placement.ErrorAnswer("no VM here"))
			return
		}
		if err := placement.SendAnswer(c, args, files); err != nil {
			t.Error(err)
		}
	}()
}

// runWrapper runs the wrapper with args against the Placer at sock and
// returns what it (and the fake qemu) printed.
func runWrapper(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	qemu := filepath.Join(t.TempDir(), fakeQemu)
	if err := os.Symlink(self, qemu); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), wrapperEnv+"="+qemu, placement.SocketEnv+"="+sock)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestWrapper(t *testing.T) {
	name := []string{"-name", "guest=crimux-vm-1,debug-threads=on", "-S"}

	t.Run("files and arguments reach qemu", func(t *testing.T) {
		sock := socketPath(t)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		serveOnce(t, sock, []string{"-netdev", "tap,id=net0,fd=" + placement.FDPlaceholder(0)}, w)
		out, err := runWrapper(t, sock, name...)
		if err != nil {
			t.Fatalf("wrapper: %v: %s", err, out)
		}
		prefix := `qemu ["-name" "guest=crimux-vm-1,debug-threads=on" "-S" "-netdev" "tap,id=net0,fd=`
		if !strings.HasPrefix(out, prefix) {
			t.Errorf("qemu ran with %s, want %s<n>\"]", out, prefix)
		}
		_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(r); err != nil || string(got) != "hello" {
			t.Errorf("read %q, %v through the tap; want %q", got, err, "hello")
		}
	})

	t.Run("refused", func(t *testing.T) {
		sock := socketPath(t)
		serveOnce(t, sock, nil)
		out, err := runWrapper(t, sock, name...)
		want := "crimux-qemu-wrapper: not starting qemu for domain crimux-vm-1: placement into the pod's cgroup via " +
			sock + ": placement refused: no VM here"
		if err == nil || out != want {
			t.Errorf("wrapper: %v: %q; want a failure with %q", err, out, want)
		}
	})

	t.Run("qemu opens only what its arguments name", func(t *testing.T) {
		if landlock.ABI() == 0 {
			t.Skip("this kernel has no Landlock")
		}
		vmDir, elsewhere := t.TempDir(), t.TempDir()
		disk, host := filepath.Join(vmDir, "disk"), filepath.Join(elsewhere, "host-file")
		for _, f := range []string{disk, host} {
			if err := os.WriteFile(f, []byte("bytes of "+filepath.Base(f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		sock := socketPath(t)
		serveOnce(t, sock, []string{})
		// The disk is named on the command line; the host file only by
		// what qemu reads (a header's data file).
		t.Setenv(catEnv, disk+" "+host)
		out, err := runWrapper(t, sock, append(name, "-blockdev", `{"driver":"file","filename":"`+disk+`"}`)...)
		if err != nil {
			t.Fatalf("wrapper: %v: %s", err, out)
		}
		if !strings.Contains(out, "cat "+disk+`: "bytes of disk" <nil>`) {
			t.Errorf("qemu could not read its own disk:\n%s", out)
		}
		if !strings.Contains(out, "cat "+host+`: "" open `+host+": permission denied") {
			t.Errorf("qemu read a file its command line does not name:\n%s", out)
		}
	})

	t.Run("foreign domain", func(t *testing.T) {
		out, err := runWrapper(t, "/nonexistent", "-name", "guest=other", "-S")
		if want := `qemu ["-name" "guest=other" "-S"]`; err != nil || out != want {
			t.Errorf("wrapper: %v: %q; want %q", err, out, want)
		}
	})
}

func TestArgDirs(t *testing.T) {
	got := argDirs([]string{
		"/usr/bin/qemu-system-x86_64",
		"-blockdev", `{"driver":"file","filename":"/var/lib/crimux/pods/p1/disk.qcow2","node-name":"libvirt-1-storage"}`,
		"-chardev", "socket,id=fs0,path=/var/lib/crimux/vms/v1/run/fs0.sock",
		"-incoming", "unix:/run/crimux/migration/tok/mem.sock",
		"-object", "memory-backend-file,id=ram,mem-path=/dev/hugepages/libvirt/qemu/1-x",
		"-name", "guest=crimux-vm-1,debug-threads=on", "-drive", "file=/x", "-L", "/",
	})
	want := []string{"/var/lib/crimux/pods/p1", "/var/lib/crimux/vms/v1/run", "/run/crimux/migration/tok", "/dev/hugepages/libvirt/qemu"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("argDirs:\n got %q\nwant %q (nothing less than three deep: not /usr/bin, /var/lib/crimux, /)", got, want)
	}
}

// TestArgFiles: a file argv names is allowed alone, however shallow its
// directory (a kernel in /boot); a directory is never allowed as a file.
func TestArgFiles(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := argFiles([]string{"/usr/bin/qemu-system-x86_64", "-kernel", kernel, "-L", dir, "-drive", "file=/nonexistent/x"})
	if want := []string{"/usr/bin/qemu-system-x86_64", kernel}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("argFiles = %q, want %q", got, want)
	}
}
