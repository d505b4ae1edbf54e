package placer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/cgroup"
	"github.com/crimux/crimux/runtimes/libvirt/placement"
)

// The test binary doubles as a fake wrapper: with these variables set it
// asks the placer to place it, prints the arguments it got, writes "hello"
// through each file an argument "fd=<n>" names, and exits.
const (
	helperSocketEnv = "CRIMUX_TEST_PLACER_SOCKET"
	helperAskEnv    = "CRIMUX_TEST_PLACER_ASK"
)

// hybridLayout is this test bed's v1 hybrid layout (see cgroup's tests).
var hybridLayout = cgroup.Layout{Hierarchies: []cgroup.Hierarchy{
	{Mount: "/sys/fs/cgroup/cpu", Controllers: []string{"cpu"}},
	{Mount: "/sys/fs/cgroup/cpuacct", Controllers: []string{"cpuacct"}},
	{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
	{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
	{Mount: "/sys/fs/cgroup/unified", Unified: true, Controllers: []string{"hugetlb"}},
}}

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperSocketEnv); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args, err := placement.Request(ctx, sock, os.Getenv(helperAskEnv))
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("args: %q\n", args)
		for _, a := range args {
			if _, fd, ok := strings.Cut(a, "fd="); ok {
				n, _ := strconv.Atoi(fd)
				if _, err := os.NewFile(uintptr(n), "attached").WriteString("hello"); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper runs the fake wrapper with qemu's -name for domain `is`,
// asking to be placed as `asks`. It returns its pid and what it printed
// (stdout and stderr).
func runHelper(t *testing.T, sock, is, asks string) (int, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-name", "guest="+is+",debug-threads=on")
	cmd.Env = append(os.Environ(), helperSocketEnv+"="+sock, helperAskEnv+"="+asks)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	return cmd.Process.Pid, strings.TrimSpace(out.String()), err
}

type placed struct {
	spec cgroup.Spec
	pid  int
}

// startPlacer serves a Placer that knows crimux-vm-1 and records its
// placements instead of making them; placements returns them so far.
func startPlacer(t *testing.T, placeErr error, opts ...PlacerOption) (sock string, placements func() []placed) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crimux-pl")
	if err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(dir, "placement.sock")
	specs := map[string]cgroup.Spec{"crimux-vm-1": {Parent: "/kubepods/pod1", Name: "crimux-vm-1"}}
	opts = append([]PlacerOption{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithLauncher(ownCgroups)}, opts...)
	p := New(sock, func(name string) (cgroup.Spec, bool) { s, ok := specs[name]; return s, ok }, opts...)
	var mu sync.Mutex
	var calls []placed
	p.layout = func() (cgroup.Layout, error) { return hybridLayout, nil }
	p.place = func(_ cgroup.Layout, s cgroup.Spec, pid int) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, placed{s, pid})
		return placeErr
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
		os.RemoveAll(dir)
	})
	// The socket exists from listen on and gets its mode just after: it
	// is ready once it has it.
	var mode os.FileMode
	for i := 0; i < 200; i++ {
		if fi, err := os.Stat(sock); err == nil {
			if mode = fi.Mode().Perm(); mode == 0o666 {
				return sock, func() []placed {
					mu.Lock()
					defer mu.Unlock()
					return slices.Clone(calls)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("placer did not listen with a socket of mode 0666 (mode %v)", mode)
	return "", nil
}

// ownCgroups are this test's cgroups, which its helpers inherit: the
// cgroups libvirt would start qemu in, as far as the tests go.
func ownCgroups() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	return string(b), err
}

func TestPlacer(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		is, asks string
		opts     []PlacerOption
		placeErr error
		wantErr  string // "" means placed
	}{
		{name: "the VM it is", is: "crimux-vm-1", asks: "crimux-vm-1"},
		{name: "right executable and uid", is: "crimux-vm-1", asks: "crimux-vm-1",
			opts: []PlacerOption{WithExecutable(self), WithPeerUIDs(uint32(os.Getuid()))}},
		{name: "another VM than it is", is: "crimux-vm-2", asks: "crimux-vm-1", wantErr: "its -name is guest=crimux-vm-2"},
		{name: "unknown VM", is: "crimux-vm-9", asks: "crimux-vm-9", wantErr: "no VM of crimux is named crimux-vm-9"},
		{name: "foreign name", is: "other", asks: "other", wantErr: "does not start with"},
		{name: "wrong uid", is: "crimux-vm-1", asks: "crimux-vm-1", opts: []PlacerOption{WithPeerUIDs(4242)},
			wantErr: "is not a qemu user"},
		{name: "wrong executable", is: "crimux-vm-1", asks: "crimux-vm-1", opts: []PlacerOption{WithExecutable("/usr/bin/true")},
			wantErr: "not /usr/bin/true"},
		{name: "placement fails", is: "crimux-vm-1", asks: "crimux-vm-1", placeErr: errors.New("cgroupfs says no"),
			wantErr: "cgroupfs says no"},
		// What the caller cannot choose decides.
		{name: "not from libvirt (a pod's cgroups)", is: "crimux-vm-1", asks: "crimux-vm-1",
			opts:    []PlacerOption{WithLauncher(func() (string, error) { return "0::/machine/libvirtd\n", nil })},
			wantErr: "does not come from libvirt"},
		{name: "no start in flight", is: "crimux-vm-1", asks: "crimux-vm-1",
			opts: []PlacerOption{WithGrants(func(string) bool { return false })}, wantErr: "crimux is not starting crimux-vm-1"},
		{name: "start in flight", is: "crimux-vm-1", asks: "crimux-vm-1",
			opts: []PlacerOption{WithGrants(func(d string) bool { return d == "crimux-vm-1" })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, placements := startPlacer(t, tc.placeErr, tc.opts...)
			pid, out, err := runHelper(t, sock, tc.is, tc.asks)
			calls := placements()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("helper: %v: %s", err, out)
				}
				if len(calls) != 1 || calls[0].pid != pid || calls[0].spec.Name != "crimux-vm-1" {
					t.Errorf("placements %+v, want one of pid %d as crimux-vm-1", calls, pid)
				}
				return
			}
			if err == nil || !strings.Contains(out, tc.wantErr) {
				t.Errorf("helper: %v: %q; want a refusal with %q", err, out, tc.wantErr)
			}
			if tc.placeErr == nil && len(calls) != 0 {
				t.Errorf("placed %+v despite the refusal", calls)
			}
		})
	}
}

// pipe returns a pipe; the test closes the read end at its end.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, w
}

// readAll reads r to its end, which comes once no copy of the write end
// is left open, in this process (the Placer's) or the helper.
func readAll(t *testing.T, r *os.File) string {
	t.Helper()
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read pipe (a write end left open?): %v", err)
	}
	return string(b)
}

func TestPlacerAttach(t *testing.T) {
	for _, tc := range []struct {
		name      string
		is        string
		args      []string
		attachErr error
		wantOut   string // in the helper's output
		wantErr   bool
		wantRead  string // through the pipe
	}{
		{name: "file and arguments", is: "crimux-vm-1", args: []string{"-netdev", "tap,id=net0,fd=" + placement.FDPlaceholder(0)},
			wantOut: `args: ["-netdev" "tap,id=net0,fd=`, wantRead: "hello"},
		{name: "attach fails", is: "crimux-vm-1", args: []string{"fd={fd0}"}, attachErr: errors.New("no tap in the pod"),
			wantOut: "files and arguments for qemu of crimux-vm-1: no tap in the pod", wantErr: true},
		{name: "broken attachment", is: "crimux-vm-1", args: []string{"fd={fd0}\n-S"},
			wantOut: "holds a newline or NUL", wantErr: true},
		{name: "file nobody names", is: "crimux-vm-1", args: []string{"-S"},
			wantOut: "file 0 of the answer is named by no argument", wantErr: true},
		{name: "placement refused", is: "crimux-vm-2",
			wantOut: "its -name is guest=crimux-vm-2", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := pipe(t)
			var asked []string
			var mu sync.Mutex
			sock, _ := startPlacer(t, nil, WithAttach(func(domain string) (Attachment, error) {
				mu.Lock()
				asked = append(asked, domain)
				mu.Unlock()
				return Attachment{Files: []*os.File{w}, Args: tc.args}, tc.attachErr
			}))
			_, out, err := runHelper(t, sock, tc.is, "crimux-vm-1")
			if (err != nil) != tc.wantErr || !strings.Contains(out, tc.wantOut) {
				t.Fatalf("helper: %v: %q; want failure %v with %q", err, out, tc.wantErr, tc.wantOut)
			}
			mu.Lock()
			wasAsked := len(asked) == 1 && asked[0] == "crimux-vm-1"
			mu.Unlock()
			if want := tc.is == "crimux-vm-1"; wasAsked != want {
				t.Fatalf("attach asked for %q, want asked: %v", asked, want)
			}
			if !wasAsked {
				w.Close() // never handed to the Placer
			}
			if got := readAll(t, r); got != tc.wantRead {
				t.Errorf("read %q through the attached file, want %q", got, tc.wantRead)
			}
			// The pipe's end came: the Placer closed the file it was handed.
			if err := w.Close(); !errors.Is(err, os.ErrClosed) {
				t.Errorf("the Placer left the attached file open (Close: %v)", err)
			}
		})
	}
}

func TestPlacerEmptyAttachment(t *testing.T) {
	sock, placements := startPlacer(t, nil, WithAttach(func(string) (Attachment, error) { return Attachment{}, nil }))
	_, out, err := runHelper(t, sock, "crimux-vm-1", "crimux-vm-1")
	calls := placements()
	if err != nil || out != "args: []" || len(calls) != 1 {
		t.Fatalf("helper: %v: %q; placements %+v; want a plain ok", err, out, calls)
	}
}

// TestPlacerLeavesAnotherSocket: a placer that stops removes its socket,
// not the one another process put at the same path meanwhile (a second
// crimux with the same placement socket, whose VM starts were all refused
// once the first had stopped).
func TestPlacerLeavesAnotherSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "placement.sock")
	p := New(sock, func(string) (cgroup.Spec, bool) { return cgroup.Spec{}, false },
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithLauncher(ownCgroups))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	for i := 0; ; i++ {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Perm() == 0o666 {
			break
		}
		if i == 200 {
			t.Fatal("placer did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The other process replaces the socket, as listen does.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the other process's socket is gone after the first placer stopped: %v", err)
	}
	conn.Close()
}
