package podnet

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdLockHelperEnv makes this test binary, run again, another crimux
// holding the host lock: "read" (its call in flight) or "write" (its GC
// round) on the file named by lockHelperPathEnv, until its stdin closes.
const (
	holdLockHelperEnv = "PODNET_TEST_HOLD_LOCK"
	lockHelperPathEnv = "PODNET_TEST_LOCK_PATH"
)

func TestHostLockHelper(t *testing.T) {
	how := os.Getenv(holdLockHelperEnv)
	if how == "" {
		t.Skip("the other crimux of TestHostLock*; not a test of its own")
	}
	l := &hostLock{path: os.Getenv(lockHelperPathEnv)}
	typ := int16(unix.F_RDLCK)
	if how == "write" {
		typ = unix.F_WRLCK
	}
	if err := l.set(typ); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// otherCrimux runs the helper holding the lock at path; the returned func
// makes it let go.
func otherCrimux(t *testing.T, path, how string) (letGo func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostLockHelper$")
	cmd.Env = append(os.Environ(), holdLockHelperEnv+"="+how, lockHelperPathEnv+"="+path)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		t.Fatalf("the other crimux did not take the lock: %q", line)
	}
	return func() { stdin.Close(); _ = cmd.Wait() }
}

// waitsFor requires fn to be still running after a while, then lets the
// other crimux go and requires fn to finish.
func waitsFor(t *testing.T, what string, letGo func(), fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		t.Fatalf("%s did not wait for the other crimux", what)
	case <-time.After(300 * time.Millisecond):
	}
	letGo()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not run once the other crimux let go", what)
	}
}

// A GC round waits for another crimux's ADD or DEL in flight.
func TestHostLockGCWaitsForAnotherCrimuxsCall(t *testing.T) {
	lock := hostLockOf(filepath.Join(t.TempDir(), "netns"))
	letGo := otherCrimux(t, lock.path, "read")
	f := newInflight(lock)
	waitsFor(t, "a GC round", letGo, func() { _ = f.round(func([]string) error { return nil }) })
}

// An ADD or DEL waits for another crimux's GC round.
func TestHostLockCallWaitsForAnotherCrimuxsGC(t *testing.T) {
	lock := hostLockOf(filepath.Join(t.TempDir(), "netns"))
	letGo := otherCrimux(t, lock.path, "write")
	f := newInflight(lock)
	waitsFor(t, "an ADD", letGo, func() { f.begin("pod")() })
}

// This crimux's own call in flight does not hold its GC round back (the
// round names it instead), and a round ends with the lock back to what
// the call holds.
func TestHostLockOwnCallDoesNotHoldGCBack(t *testing.T) {
	lock := hostLockOf(filepath.Join(t.TempDir(), "netns"))
	f := newInflight(lock)
	end := f.begin("pod")
	var busy []string
	if err := f.round(func(b []string) error { busy = b; return nil }); err != nil || len(busy) != 1 {
		t.Fatalf("round: %v, busy %v; want it run beside the call, naming it", err, busy)
	}
	end()
	letGo := otherCrimux(t, lock.path, "write") // free again: another crimux takes it
	letGo()
}
