package migproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestBytesFlowBothWaysAndHalfCloseArrives(t *testing.T) {
	r := newRig(t, headerTimeout)
	token := NewToken()
	cancel := r.listener.Expect(token, os.Geteuid(), r.sockets)
	defer cancel()
	fw, src := r.forward(t, token)

	big := make([]byte, 1<<20)
	rand.Read(big)
	small := []string{"nbd one", "nbd two", "nbd three"}
	var wg sync.WaitGroup
	check := func(path string, payload []byte) {
		defer wg.Done()
		reply, err := exchange(t, path, payload)
		if err != nil {
			t.Errorf("exchange on %s: %v", path, err)
		}
		if want := append(append([]byte{}, payload...), bye...); !bytes.Equal(reply, want) {
			t.Errorf("reply on %s: %d bytes, want %d (payload echoed, then %q after EOF)", path, len(reply), len(want), bye)
		}
	}
	wg.Add(1 + len(small))
	go check(src["mem"], big)
	for _, s := range small { // qemu's NBD client may open several connections
		go check(src["disk"], []byte(s))
	}
	wg.Wait()

	want := int64(len(big))
	for _, s := range small {
		want += int64(len(s))
	}
	if got := fw.Bytes(); got != want {
		t.Errorf("Bytes() = %d, want %d", got, want)
	}
	if got := r.accepted(); got != 4 {
		t.Errorf("target sockets took %d connections, want 4", got)
	}
}

func TestSocketsOwnedByTheVMAndRemovedOnClose(t *testing.T) {
	owners := [][2]int{{os.Getuid(), os.Getgid()}}
	if os.Getuid() == 0 {
		owners = append(owners, [2]int{4242, 4343})
	}
	for _, owner := range owners {
		t.Run(fmt.Sprintf("%d:%d", owner[0], owner[1]), func(t *testing.T) {
			_, client := node(t, newCA(t, "cluster"))
			dir := filepath.Join(shortDir(t), "run", "tok")
			sock := filepath.Join(dir, "mem.sock")
			fw, err := Start(Forward{Token: NewToken(), Target: "127.0.0.1:1", Client: client,
				Channels: map[string]string{"mem": sock}, UID: owner[0], GID: owner[1]})
			if err != nil {
				t.Fatal(err)
			}
			checkOwner(t, sock, fs.ModeSocket|0o600, owner)
			checkOwner(t, dir, fs.ModeDir|0o700, owner)
			if err := fw.Close(); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{sock, dir} {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s after Close: %v, want it gone", p, err)
				}
			}
		})
	}
}

func checkOwner(t *testing.T, path string, mode fs.FileMode, owner [2]int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != mode || int(st.Uid) != owner[0] || int(st.Gid) != owner[1] {
		t.Errorf("%s: %v %d:%d, want %v %d:%d", path, fi.Mode(), st.Uid, st.Gid, mode, owner[0], owner[1])
	}
}

func TestUnknownTokenNeverReachesTheSocket(t *testing.T) {
	r := newRig(t, headerTimeout)
	defer r.listener.Expect(NewToken(), os.Geteuid(), r.sockets)()
	_, src := r.forward(t, NewToken())
	if reply, _ := exchange(t, src["mem"], []byte("hello")); len(reply) != 0 {
		t.Errorf("refused connection replied %q", reply)
	}
	if got := r.accepted(); got != 0 {
		t.Errorf("target sockets took %d connections, want 0", got)
	}
	if !strings.Contains(r.logs.String(), "not expected") {
		t.Errorf("refusal not logged; logs:\n%s", r.logs)
	}
}

func TestCancelRefusesNewConnectionsAndCutsLiveOnes(t *testing.T) {
	r := newRig(t, headerTimeout)
	token := NewToken()
	cancel := r.listener.Expect(token, os.Geteuid(), r.sockets)
	_, src := r.forward(t, token)
	if reply, err := exchange(t, src["mem"], []byte("before")); err != nil || string(reply) != "before"+bye {
		t.Fatalf("before cancel: %q, %v", reply, err)
	}
	live := dialUnix(t, src["disk"])
	waitFor(t, "live connection at the target", func() bool { return r.accepted() == 2 })

	cancel()
	live.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := live.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("live connection after cancel: read %v, want it cut", err)
	}
	if reply, _ := exchange(t, src["mem"], []byte("after")); len(reply) != 0 {
		t.Errorf("after cancel: replied %q", reply)
	}
	if got := r.accepted(); got != 2 {
		t.Errorf("target sockets took %d connections, want 2", got)
	}
}

func TestTargetOfAnotherCARefused(t *testing.T) {
	r := newRig(t, headerTimeout)
	token := NewToken()
	defer r.listener.Expect(token, os.Geteuid(), r.sockets)()
	_, foreign := node(t, newCA(t, "other"))
	_, src := r.forwardWith(t, token, foreign)
	if reply, _ := exchange(t, src["mem"], []byte("hello")); len(reply) != 0 {
		t.Errorf("forwarder trusting another CA got reply %q", reply)
	}
	if got := r.accepted(); got != 0 {
		t.Errorf("target sockets took %d connections, want 0", got)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtimeGoroutines()
	r := newRig(t, headerTimeout)
	token := NewToken()
	r.listener.Expect(token, os.Geteuid(), r.sockets)
	fw, src := r.forward(t, token)
	if reply, err := exchange(t, src["mem"], []byte("x")); err != nil || string(reply) != "x"+bye {
		t.Fatalf("exchange: %q, %v", reply, err)
	}
	live := dialUnix(t, src["disk"]) // carried when Close comes
	waitFor(t, "live connection at the target", func() bool { return r.accepted() == 2 })
	silent := dialTCP(t, r.listener.Addr()) // stuck before its handshake

	// The Listener goes first: its Close alone must cut what it carries
	// and the peer still in its handshake.
	closeWithin(t, "Listener", r.listener.Close)
	expectCut(t, "carried connection", live)
	expectCut(t, "connection in handshake", silent)
	closeWithin(t, "Forwarder", fw.Close) // live is still open at the source
	for _, e := range r.echo {
		e.close()
	}
	waitFor(t, fmt.Sprintf("goroutines back to %d", before), func() bool { return runtimeGoroutines() <= before })
}

// expectCut fails unless c is closed from the other end within seconds.
func expectCut(t *testing.T, what string, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("%s: read %v, want it cut", what, err)
	}
}

// closeWithin fails the test, rather than hanging it, if close blocks.
func closeWithin(t *testing.T, what string, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s.Close: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s.Close still blocked after 5s", what)
	}
}
