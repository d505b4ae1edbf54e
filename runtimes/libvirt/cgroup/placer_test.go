package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/cgroup/placement"
)

// The test binary doubles as a fake wrapper: with these variables set it
// asks the placer to place it and exits.
const (
	helperSocketEnv = "CRIMUX_TEST_PLACER_SOCKET"
	helperAskEnv    = "CRIMUX_TEST_PLACER_ASK"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperSocketEnv); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := placement.Request(ctx, sock, os.Getenv(helperAskEnv))
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper runs the fake wrapper with qemu's -name for domain `is`,
// asking to be placed as `asks`. It returns its pid and what it printed.
func runHelper(t *testing.T, sock, is, asks string) (int, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-name", "guest="+is+",debug-threads=on")
	cmd.Env = append(os.Environ(), helperSocketEnv+"="+sock, helperAskEnv+"="+asks)
	var out strings.Builder
	cmd.Stderr = &out
	err := cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	return cmd.Process.Pid, strings.TrimSpace(out.String()), err
}

type placed struct {
	spec Spec
	pid  int
}

func startPlacer(t *testing.T, placeErr error, opts ...PlacerOption) (string, *[]placed) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crimux-pl")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "placement.sock")
	specs := map[string]Spec{"crimux-vm-1": {Parent: "/kubepods/pod1", Name: "crimux-vm-1"}}
	opts = append([]PlacerOption{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	p := NewPlacer(sock, func(name string) (Spec, bool) { s, ok := specs[name]; return s, ok }, opts...)
	var mu sync.Mutex
	var calls []placed
	p.layout = func() (Layout, error) { return hybridLayout, nil }
	p.place = func(_ Layout, s Spec, pid int) error {
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
	for i := 0; i < 100; i++ {
		if fi, err := os.Stat(sock); err == nil {
			if fi.Mode().Perm() != 0o666 {
				t.Errorf("socket mode %v, want 0666", fi.Mode().Perm())
			}
			return sock, &calls
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("placer did not listen")
	return "", nil
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, calls := startPlacer(t, tc.placeErr, tc.opts...)
			pid, out, err := runHelper(t, sock, tc.is, tc.asks)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("helper: %v: %s", err, out)
				}
				if len(*calls) != 1 || (*calls)[0].pid != pid || (*calls)[0].spec.Name != "crimux-vm-1" {
					t.Errorf("placements %+v, want one of pid %d as crimux-vm-1", *calls, pid)
				}
				return
			}
			if err == nil || !strings.Contains(out, tc.wantErr) {
				t.Errorf("helper: %v: %q; want a refusal with %q", err, out, tc.wantErr)
			}
			if tc.placeErr == nil && len(*calls) != 0 {
				t.Errorf("placed %+v despite the refusal", *calls)
			}
		})
	}
}
