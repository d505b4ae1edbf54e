package migproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// otherUID is a uid no process of the test runs as: the target qemu's
// uid of an expectation whose socket is in fact the test's (as root:
// crimux's or libvirtd's).
const otherUID = 4242

// sink stands for a daemon's socket that the target qemu would like
// crimux to write a migration stream into: it records every connection
// it accepts, what it reads from each and whether each ended in a clean
// EOF, and never writes.
type sink struct {
	ln       *net.UnixListener
	wg       sync.WaitGroup
	mu       sync.Mutex
	accepted int
	read     bytes.Buffer
	errs     []error
}

func startSink(t *testing.T, path string) *sink {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *sink) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.accepted++
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var got bytes.Buffer
			_, err := io.Copy(&got, c)
			s.mu.Lock()
			s.read.Write(got.Bytes())
			if err != nil {
				s.errs = append(s.errs, err)
			}
			s.mu.Unlock()
		}()
	}
}

// close stops the sink and waits until each connection it took has
// ended: after it, what the sink read is all it will ever read.
func (s *sink) close() {
	s.ln.Close()
	s.wg.Wait()
}

// check closes the sink and fails t if a byte reached it or a connection
// it took was left open rather than closed at once.
func (s *sink) check(t *testing.T) {
	t.Helper()
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read.Len() != 0 {
		t.Errorf("the foreign socket read %d bytes (%q), want none", s.read.Len(), s.read.String())
	}
	for _, err := range s.errs {
		t.Errorf("a connection to the foreign socket ended with %v, want it closed at once, empty", err)
	}
}

// refusedThrough sends payload from the source qemu's end and fails t if
// it was carried: foreign must read nothing and close what it took at
// once, the reply must not hold the echo server's "bye", and the
// Listener must have logged a refusal.
func refusedThrough(t *testing.T, r *rig, src string, payload []byte, foreign *sink) {
	t.Helper()
	reply, _ := exchange(t, src, payload)
	foreign.check(t)
	if bytes.Contains(reply, []byte(bye)) || bytes.Contains(reply, payload) {
		t.Errorf("reply %q: the connection was carried, want it refused", reply)
	}
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(r.logs.String(), "is not the target qemu's"); {
		if time.Now().After(deadline) {
			t.Errorf("no refusal logged:\n%s", r.logs.String())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenerRefusesALinkToAForeignSocket: the target qemu owns the
// directory of its sockets and may swap mem.sock for a symlink to a
// root daemon's socket. crimux, root, must not follow it: the daemon
// never reads a byte of the migration stream, and the connection is
// refused.
func TestListenerRefusesALinkToAForeignSocket(t *testing.T) {
	r := newRig(t, headerTimeout)
	dir := filepath.Dir(r.sockets["mem"])
	daemon := startSink(t, filepath.Join(dir, "daemon.sock"))
	if err := os.Remove(r.sockets["mem"]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("daemon.sock", r.sockets["mem"]); err != nil {
		t.Fatal(err)
	}
	token := NewToken()
	defer r.listener.Expect(token, otherUID, r.sockets)()
	_, src := r.forward(t, token)

	refusedThrough(t, r, src["mem"], []byte("the memory of the source VM"), daemon)
}

// TestListenerRefusesALinkEvenToTheExpectedUID: a symlink is refused as
// such, whoever listens behind it; here the test's own uid, which the
// expectation names.
func TestListenerRefusesALinkEvenToTheExpectedUID(t *testing.T) {
	r := newRig(t, headerTimeout)
	dir := filepath.Dir(r.sockets["mem"])
	behind := startSink(t, filepath.Join(dir, "other.sock"))
	if err := os.Remove(r.sockets["mem"]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "other.sock"), r.sockets["mem"]); err != nil {
		t.Fatal(err)
	}
	token := NewToken()
	defer r.listener.Expect(token, os.Geteuid(), r.sockets)()
	_, src := r.forward(t, token)

	refusedThrough(t, r, src["mem"], []byte("the memory of the source VM"), behind)
	if behind.accepted != 0 {
		t.Errorf("the socket behind the link took %d connections, want 0: the link was followed", behind.accepted)
	}
}

// TestListenerRefusesASocketOfAnotherUID: a socket at the very path, but
// listened on by another uid than the target qemu's (here the test's,
// root's as crimux or libvirtd would be), is refused before a byte is
// written to it.
func TestListenerRefusesASocketOfAnotherUID(t *testing.T) {
	r := newRig(t, headerTimeout)
	r.echo["mem"].close()
	os.Remove(r.sockets["mem"])
	daemon := startSink(t, r.sockets["mem"])
	token := NewToken()
	defer r.listener.Expect(token, otherUID, r.sockets)()
	_, src := r.forward(t, token)

	refusedThrough(t, r, src["mem"], []byte("the memory of the source VM"), daemon)
}

// TestListenerCarriesToTheExpectedUID: the same socket, with the
// expectation naming the uid that listens on it, is carried as ever.
func TestListenerCarriesToTheExpectedUID(t *testing.T) {
	r := newRig(t, headerTimeout)
	token := NewToken()
	defer r.listener.Expect(token, os.Geteuid(), r.sockets)()
	_, src := r.forward(t, token)
	payload := []byte("the memory of the source VM")
	reply, err := exchange(t, src["mem"], payload)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(payload) + bye; string(reply) != want {
		t.Errorf("reply %q, want %q", reply, want)
	}
}

// TestDialLocalTakesOnlyASocket: whatever else qemu may leave at a
// socket's path is refused, and opening it has no effect (a FIFO is not
// opened for reading or writing, which would block or reach its other
// end).
func TestDialLocalTakesOnlyASocket(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "sock")
	startEcho(t, sock)
	for name, make := range map[string]func(path string) error{
		"regular file": func(p string) error { return os.WriteFile(p, []byte("x"), 0o600) },
		"directory":    func(p string) error { return os.Mkdir(p, 0o700) },
		"fifo":         func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"link":         func(p string) error { return os.Symlink(sock, p) },
		"dangling":     func(p string) error { return os.Symlink(filepath.Join(dir, "none"), p) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := make(path); err != nil {
				t.Fatal(err)
			}
			if c, err := dialLocal(path, os.Geteuid(), time.Second); err == nil {
				c.Close()
				t.Error("dialLocal connected")
			} else if !errors.Is(err, errForeignSocket) {
				t.Errorf("dialLocal: %v, want a refusal (errForeignSocket)", err)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		if c, err := dialLocal(filepath.Join(dir, "none"), os.Geteuid(), time.Second); err == nil {
			c.Close()
			t.Error("dialLocal connected")
		} else if errors.Is(err, errForeignSocket) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dialLocal: %v, want ErrNotExist, not a refusal", err)
		}
	})
	t.Run("socket", func(t *testing.T) {
		c, err := dialLocal(sock, os.Geteuid(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
}

// listenAs listens on a unix socket at path as uid would: on a thread of
// its own whose effective uid (the one SO_PEERCRED reports, and the one
// bind creates the socket file with) is uid. That thread is never given
// back to the runtime: it ends with its goroutine, and its uid with it.
func listenAs(t *testing.T, path string, uid int) *net.UnixListener {
	t.Helper()
	type result struct {
		ln  *net.UnixListener
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		// The raw syscall changes this thread alone; syscall.Setresuid
		// would change every thread of the process.
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); errno != 0 {
			done <- result{err: fmt.Errorf("setresuid: %w", errno)}
			return
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		done <- result{ln, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

// TestListenerAndAnUnprivilegedQemu: as in production, the target qemu
// runs as a uid of its own and listens in a directory of that uid's.
// The expectation of that uid is carried; one of another unprivileged
// uid (another VM's qemu) is refused.
func TestListenerAndAnUnprivilegedQemu(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to listen as another uid")
	}
	r := newRig(t, headerTimeout)
	// As the migration socket root is, the base is traversable by all.
	if err := os.Chmod(r.base, 0o711); err != nil {
		t.Fatal(err)
	}
	vm := filepath.Join(r.base, "vm")
	if err := os.Mkdir(vm, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(vm, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	qemu := serveEcho(t, listenAs(t, filepath.Join(vm, "mem.sock"), otherUID))
	if fi, err := os.Lstat(filepath.Join(vm, "mem.sock")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != otherUID {
		t.Fatalf("the socket is not uid %d's: %v", otherUID, err)
	}
	sockets := map[string]string{"mem": filepath.Join(vm, "mem.sock")}
	payload := []byte("the memory of the source VM")

	t.Run("its uid", func(t *testing.T) {
		token := NewToken()
		defer r.listener.Expect(token, otherUID, sockets)()
		_, src := r.forward(t, token)
		reply, err := exchange(t, src["mem"], payload)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(payload) + bye; string(reply) != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
	})
	t.Run("another uid", func(t *testing.T) {
		before := qemu.accepted.Load()
		token := NewToken()
		defer r.listener.Expect(token, otherUID+1, sockets)()
		_, src := r.forward(t, token)
		reply, _ := exchange(t, src["mem"], payload)
		if bytes.Contains(reply, []byte(bye)) || bytes.Contains(reply, payload) {
			t.Errorf("reply %q: the connection was carried, want it refused", reply)
		}
		waitFor(t, "the refusal in the log", func() bool {
			return strings.Contains(r.logs.String(), fmt.Sprintf("uid %d listens on it, the target qemu runs as %d", otherUID, otherUID+1))
		})
		// The refused connection reached qemu's accept, and was closed
		// without a byte; the echo server would have echoed one.
		if got := qemu.accepted.Load() - before; got > 1 {
			t.Errorf("qemu took %d connections, want at most 1", got)
		}
	})
}
