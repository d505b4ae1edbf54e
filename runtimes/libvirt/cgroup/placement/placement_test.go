package placement

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestGuestName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		want   string
		wantOK bool
	}{
		{"libvirt", []string{"-name", "guest=crimux-vm-1,debug-threads=on", "-S"}, "crimux-vm-1", true},
		{"escaped comma", []string{"-name", "guest=crimux-a,,b,debug-threads=on"}, "crimux-a,b", true},
		{"legacy", []string{"-name", "crimux-vm-2"}, "crimux-vm-2", true},
		{"guest not first", []string{"-name", "debug-threads=on,guest=crimux-vm-3"}, "crimux-vm-3", true},
		{"equals form", []string{"--name=guest=crimux-vm-4"}, "crimux-vm-4", true},
		{"probe", []string{"-S", "-no-user-config", "-machine", "none,accel=kvm:tcg", "-qmp", "unix:/x"}, "", false},
		{"help", []string{"-help"}, "", false},
		{"dangling", []string{"-name"}, "", false},
		{"none", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := GuestName(tc.args)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("GuestName(%q) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"crimux-vm-1": true, "crimux-": false, "vm-1": false, "crimux-a b": false,
		"crimux-a/b": false, "crimux-a\n": false, "crimux-" + string(make([]byte, 300)): false,
	} {
		if err := ValidName(name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// serve answers each connection with the next answer ("" closes without
// one) and reports the names it was sent.
func serve(t *testing.T, ln net.Listener, answers []string, names chan<- string) {
	t.Helper()
	go func() {
		for _, a := range answers {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			names <- line
			if a != "" {
				_, _ = c.Write([]byte(a))
			}
			c.Close()
		}
	}()
}

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "crimux-pl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

func TestRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("ok", func(t *testing.T) {
		sock := socketPath(t)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		names := make(chan string, 4)
		serve(t, ln, []string{"ok\n"}, names)
		if err := Request(ctx, sock, "crimux-vm-1"); err != nil {
			t.Fatal(err)
		}
		if n := <-names; n != "crimux-vm-1\n" {
			t.Errorf("server got %q", n)
		}
	})

	t.Run("refused is final", func(t *testing.T) {
		sock := socketPath(t)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		names := make(chan string, 4)
		serve(t, ln, []string{ErrorAnswer("no VM\nhere"), "ok\n"}, names)
		err = Request(ctx, sock, "crimux-vm-1")
		if !errors.Is(err, ErrRefused) || err.Error() != "placement refused: no VM here" {
			t.Fatalf("Request = %v, want the refusal", err)
		}
	})

	t.Run("server restarts", func(t *testing.T) {
		sock := socketPath(t)
		done := make(chan error, 1)
		go func() { done <- Request(ctx, sock, "crimux-vm-1") }()
		time.Sleep(300 * time.Millisecond) // not listening yet: the client retries
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		names := make(chan string, 4)
		// The first connection dies without an answer (crimux killed).
		serve(t, ln, []string{"", "ok\n"}, names)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("nobody answers", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		err := Request(short, socketPath(t), "crimux-vm-1")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Request = %v, want the deadline", err)
		}
	})
}
