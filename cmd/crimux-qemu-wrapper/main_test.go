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

	"github.com/crimux/crimux/runtimes/libvirt/placement"
)

// The test binary plays both parts: run with wrapperEnv set to a path it
// is the wrapper, execing that path as qemu; run through a link named
// fakeQemu it is qemu, printing its arguments and writing "hello" through
// each file an argument "…fd=<n>" names.
const (
	wrapperEnv = "CRIMUX_TEST_WRAPPER_QEMU"
	fakeQemu   = "fake-qemu"
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

	t.Run("foreign domain", func(t *testing.T) {
		out, err := runWrapper(t, "/nonexistent", "-name", "guest=other", "-S")
		if want := `qemu ["-name" "guest=other" "-S"]`; err != nil || out != want {
			t.Errorf("wrapper: %v: %q; want %q", err, out, want)
		}
	})
}
