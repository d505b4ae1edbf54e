package placement

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		if args, err := Request(ctx, sock, "crimux-vm-1"); err != nil || args != nil {
			t.Fatalf("Request = %q, %v; want no arguments", args, err)
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
		_, err = Request(ctx, sock, "crimux-vm-1")
		if !errors.Is(err, ErrRefused) || err.Error() != "placement refused: no VM here" {
			t.Fatalf("Request = %v, want the refusal", err)
		}
	})

	t.Run("server restarts", func(t *testing.T) {
		sock := socketPath(t)
		done := make(chan error, 1)
		go func() { _, err := Request(ctx, sock, "crimux-vm-1"); done <- err }()
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
		_, err := Request(short, socketPath(t), "crimux-vm-1")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Request = %v, want the deadline", err)
		}
	})
}

func TestFDPlaceholder(t *testing.T) {
	if got := FDPlaceholder(0); got != "{fd0}" {
		t.Errorf("FDPlaceholder(0) = %q", got)
	}
	if got := FDPlaceholder(15); got != "{fd15}" {
		t.Errorf("FDPlaceholder(15) = %q", got)
	}
}

func TestExpand(t *testing.T) {
	for arg, want := range map[string]string{
		"":                       "",
		"plain":                  "plain",
		"fd={fd0}":               "fd=<0>",
		"{fd1},{fd0},{fd1}":      "<1>,<0>,<1>",
		"{fd}{fdx}{fd-1}{fd2":    "{fd}{fdx}{fd-1}{fd2",
		"{fd{fd0}}":              "{fd<0>}",
		"{{fd00}":                "{<0>",
		"tap,id=net0,fd={fd12}x": "tap,id=net0,fd=<12>x",
	} {
		got, err := expand(arg, func(i int) (string, error) { return fmt.Sprintf("<%d>", i), nil })
		if err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	if _, err := expand("{fd99999999999999999999}", nil); err == nil {
		t.Error("expand of an overflowing placeholder succeeded")
	}
}

func TestAnswer(t *testing.T) {
	many := make([]string, MaxArgs+1)
	for _, tc := range []struct {
		name    string
		args    []string
		nfds    int
		want    string
		wantErr string
	}{
		{name: "plain ok", want: "ok\n"},
		{name: "args", args: []string{"-netdev", "tap,id=net0,fd={fd0}"}, nfds: 1,
			want: "ok 2\n-netdev\ntap,id=net0,fd={fd0}\n"},
		{name: "args without files", args: []string{"-no-reboot"}, want: "ok 1\n-no-reboot\n"},
		{name: "too many args", args: many, wantErr: "129 arguments, more than 128"},
		{name: "too many files", args: []string{"{fd0}"}, nfds: MaxFDs + 1, wantErr: "33 files, more than 32"},
		{name: "newline", args: []string{"a\nb"}, wantErr: "holds a newline or NUL"},
		{name: "NUL", args: []string{"a\x00b"}, wantErr: "holds a newline or NUL"},
		{name: "long", args: []string{strings.Repeat("x", MaxArgLen+1)}, wantErr: "longer than 4096"},
		{name: "placeholder without file", args: []string{"fd={fd1}"}, nfds: 1, wantErr: "names file 1, but 1 came"},
		{name: "file without placeholder", args: []string{"fd={fd1}"}, nfds: 2, wantErr: "file 0 of the answer is named by no argument"},
		{name: "files without args", nfds: 1, wantErr: "file 0 of the answer is named by no argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Answer(tc.args, tc.nfds)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Answer = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Answer = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// listen listens on a fresh socket and answers each connection with the
// next handler, after reading the request line.
func listen(t *testing.T, handlers ...func(c *net.UnixConn)) string {
	t.Helper()
	sock := socketPath(t)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for _, h := range handlers {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(c).ReadString('\n')
			h(c)
			c.Close()
		}
	}()
	return sock
}

// pipe returns a pipe whose ends the test closes at its end.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// readAll reads r to its end, which comes once every copy of the write end
// is closed, in this process and any other.
func readAll(t *testing.T, r *os.File) string {
	t.Helper()
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read pipe (a write end left open?): %v", err)
	}
	return string(b)
}

// fdOf is the number a placeholder was replaced with in arg, after prefix.
func fdOf(t *testing.T, arg, prefix string) int {
	t.Helper()
	s, ok := strings.CutPrefix(arg, prefix)
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Fatalf("argument %q: want %s<number>", arg, prefix)
	}
	return n
}

// useFD checks that fd is kept across exec, writes msg through it and
// closes it.
func useFD(t *testing.T, fd int, msg string) {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("fcntl %d: %v", fd, err)
	}
	if flags&unix.FD_CLOEXEC != 0 {
		t.Errorf("fd %d is close-on-exec", fd)
	}
	f := os.NewFile(uintptr(fd), "received")
	if _, err := f.WriteString(msg); err != nil {
		t.Errorf("write through fd %d: %v", fd, err)
	}
	f.Close()
}

func TestRequestFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r0, w0 := pipe(t)
	r1, w1 := pipe(t)
	sendErr := make(chan error, 1)
	sock := listen(t, func(c *net.UnixConn) {
		sendErr <- SendAnswer(c, []string{"-netdev", "tap,id=net0,fd={fd0}", "b={fd1},a={fd0}"}, []*os.File{w0, w1})
		w0.Close()
		w1.Close()
	})
	args, err := Request(ctx, sock, "crimux-vm-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("SendAnswer: %v", err)
	}
	if len(args) != 3 || args[0] != "-netdev" {
		t.Fatalf("args %q", args)
	}
	fd0 := fdOf(t, args[1], "tap,id=net0,fd=")
	b, a, _ := strings.Cut(args[2], ",")
	if fd1 := fdOf(t, b, "b="); fdOf(t, a, "a=") != fd0 || fd1 == fd0 {
		t.Fatalf("args %q: want one number for {fd0}, another for {fd1}", args)
	} else {
		useFD(t, fd1, "one")
	}
	useFD(t, fd0, "zero")
	if got := readAll(t, r0); got != "zero" {
		t.Errorf("read %q through file 0, want %q", got, "zero")
	}
	if got := readAll(t, r1); got != "one" {
		t.Errorf("read %q through file 1, want %q", got, "one")
	}
}

func TestRequestSplitAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, w := pipe(t)
	long := strings.Repeat("x", MaxArgLen-len("fd={fd0}")) + "fd={fd0}"
	answer, err := Answer([]string{long, long, "-S"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	sock := listen(t, func(c *net.UnixConn) {
		// The files ride with the first byte; the rest trickles in.
		pieces := []string{answer[:1], answer[1:4], answer[4:5000], answer[5000 : len(answer)-1], answer[len(answer)-1:]}
		if _, _, err := c.WriteMsgUnix([]byte(pieces[0]), unix.UnixRights(int(w.Fd())), nil); err != nil {
			t.Error(err)
		}
		w.Close()
		for _, p := range pieces[1:] {
			time.Sleep(20 * time.Millisecond)
			if _, err := c.Write([]byte(p)); err != nil {
				t.Error(err)
			}
		}
	})
	args, err := Request(ctx, sock, "crimux-vm-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 3 || args[0] != args[1] || args[2] != "-S" {
		t.Fatalf("args %.80q…", args)
	}
	useFD(t, fdOf(t, args[0], strings.Repeat("x", MaxArgLen-len("fd={fd0}"))+"fd="), "split")
	if got := readAll(t, r); got != "split" {
		t.Errorf("read %q, want %q", got, "split")
	}
}

// TestRequestBrokenAnswers checks that the client refuses every answer
// that breaks a rule and closes the files that came with it: the pipe's
// reader sees its end only once no copy of the write end is left open.
func TestRequestBrokenAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  string
		nfds    int
		wantErr string
	}{
		{name: "too many args", answer: "ok 129\n", wantErr: "want 1 to 128 arguments"},
		{name: "zero args", answer: "ok 0\n", wantErr: "want 1 to 128 arguments"},
		{name: "odd count", answer: "ok +1\n-S\n", wantErr: "want 1 to 128 arguments"},
		{name: "NUL in arg", answer: "ok 1\na\x00b\n", wantErr: "holds a newline or NUL"},
		{name: "long arg", answer: "ok 1\n" + strings.Repeat("x", MaxArgLen+1) + "\n", wantErr: "longer than 4096"},
		{name: "long arg without end", answer: "ok 1\n" + strings.Repeat("x", MaxArgLen+1), wantErr: "longer than 4096"},
		{name: "more lines than announced", answer: "ok 1\n-S\n-x\n", wantErr: "bytes after the answer"},
		{name: "placeholder without file", answer: "ok 1\nfd={fd0}\n", wantErr: "names file 0, but 0 came"},
		{name: "placeholder beyond the files", answer: "ok 1\nfd={fd1}\n", nfds: 1, wantErr: "names file 1, but 1 came"},
		{name: "file without placeholder", answer: "ok 1\nfd={fd0}\n", nfds: 2, wantErr: "file 1 of the answer is named by no argument"},
		{name: "files with plain ok", answer: "ok\n", nfds: 1, wantErr: "named by no argument"},
		{name: "too many files", answer: "ok\n", nfds: MaxFDs + 1, wantErr: "more than 32 files"},
		{name: "files with a refusal", answer: "error: no tap\n", nfds: 1, wantErr: "placement refused: no tap"},
		{name: "gibberish", answer: "yes\n", wantErr: "unexpected answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, w := pipe(t)
			sock := listen(t, func(c *net.UnixConn) {
				var oob []byte
				if tc.nfds > 0 {
					oob = unix.UnixRights(slices.Repeat([]int{int(w.Fd())}, tc.nfds)...)
				}
				if _, _, err := c.WriteMsgUnix([]byte(tc.answer), oob, nil); err != nil {
					t.Error(err)
				}
				w.Close()
			})
			args, err := Request(ctx, sock, "crimux-vm-1")
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Request = %q, %v; want a refusal with %q", args, err, tc.wantErr)
			}
			if got := readAll(t, r); got != "" {
				t.Errorf("read %q", got)
			}
		})
	}
}

// TestRequestRetryClosesFiles checks that an answer cut short is retried,
// and the files of the failed attempt closed.
func TestRequestRetryClosesFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, w := pipe(t)
	sock := listen(t, func(c *net.UnixConn) {
		if _, _, err := c.WriteMsgUnix([]byte("ok 2\nfd={fd0}\n"), unix.UnixRights(int(w.Fd())), nil); err != nil {
			t.Error(err)
		}
		w.Close()
	}, func(c *net.UnixConn) {
		_, _ = c.Write([]byte("ok\n"))
	})
	if args, err := Request(ctx, sock, "crimux-vm-1"); err != nil || args != nil {
		t.Fatalf("Request = %q, %v; want a plain ok", args, err)
	}
	if got := readAll(t, r); got != "" {
		t.Errorf("read %q", got)
	}
}

// FuzzParseAnswer feeds the client arbitrary answers: it must not panic,
// must accept an answer for at most one number of files, and what it
// accepts must be exactly what Answer writes for it.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{"ok\n", "ok 1\n-S\n", "ok 2\n-netdev\ntap,fd={fd0}\n", "ok 1\n{fd1}{fd0}\n",
		"error: no\n", "ok 1\n{fd{fd0}}\n", "ok 3\na\n", "ok 1\n{fd99999999999999999999}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		args, done, err := parseAnswer(data)
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("parseAnswer: %v does not wrap ErrRefused", err)
		}
		if err != nil || !done {
			return
		}
		accepted := -1
		for n := 0; n <= MaxFDs+1; n++ {
			fds := make([]int, n)
			for i := range fds {
				fds[i] = 100 + i
			}
			out, err := resolve(args, fds)
			if err != nil {
				continue
			}
			if accepted >= 0 {
				t.Fatalf("answer %q accepted with %d and %d files", data, accepted, n)
			}
			accepted = n
			if len(out) != len(args) {
				t.Fatalf("resolve(%q) = %q", args, out)
			}
			for _, a := range out {
				if strings.ContainsAny(a, "\n\x00") {
					t.Fatalf("resolved argument %q holds a newline or NUL", a)
				}
			}
			text, err := Answer(args, n)
			if err != nil || text != string(data) {
				t.Fatalf("Answer(%q, %d) = %q, %v; want %q", args, n, text, err, data)
			}
		}
	})
}
