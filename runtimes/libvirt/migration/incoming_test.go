package migration

import (
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"
)

// qemuIdentity is the uid and gid a target's socket directory is handed
// to: os.Getuid's, or, as root, another one, so the hand-over shows.
func qemuIdentity() (uid, gid int) {
	if os.Getuid() == 0 {
		return 4242, 4343
	}
	return os.Getuid(), os.Getgid()
}

// TestExpectMakesAPrivateSocketDir: a target's socket directory, named
// by a fresh token, is the target qemu's alone (0700, its uid and gid);
// Forget removes it and runs onForget, once.
func TestExpectMakesAPrivateSocketDir(t *testing.T) {
	n := startNode(t, writePKI(t), nil)
	uid, gid := qemuIdentity()
	var forgotten atomic.Int32
	token, err := n.Expect("vm--b", uid, gid, func() { forgotten.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(token) {
		t.Errorf("token %q, want 32 lowercase hex digits", token)
	}
	dir := n.Dir(token)
	if filepath.Dir(dir) != n.Config().SocketDir {
		t.Errorf("socket dir %s is not in %s", dir, n.Config().SocketDir)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("socket dir %v %d:%d, want a directory 0700 %d:%d", fi.Mode(), st.Uid, st.Gid, uid, gid)
	}
	if !n.Expecting("vm--b") || n.Expecting("vm--c") {
		t.Errorf("Expecting: vm--b %v, vm--c %v; want only vm--b", n.Expecting("vm--b"), n.Expecting("vm--c"))
	}
	n.Forget("vm--b")
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the socket dir is still there after Forget: %v", err)
	}
	if n.Expecting("vm--b") {
		t.Error("still expecting vm--b after Forget")
	}
	n.Forget("vm--b")
	if got := forgotten.Load(); got != 1 {
		t.Errorf("onForget ran %d times, want once", got)
	}
}

// TestExpectAgainReplacesTheFirst: a target prepared twice keeps only
// the second preparation: the first one's directory and onForget go.
func TestExpectAgainReplacesTheFirst(t *testing.T) {
	n := startNode(t, writePKI(t), nil)
	uid, gid := qemuIdentity()
	var first, second atomic.Int32
	token1, err := n.Expect("vm--b", uid, gid, func() { first.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	token2, err := n.Expect("vm--b", uid, gid, func() { second.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if token1 == token2 {
		t.Fatalf("the same token twice: %s", token1)
	}
	if _, err := os.Lstat(n.Dir(token1)); !os.IsNotExist(err) || first.Load() != 1 {
		t.Errorf("the first preparation: dir %v, onForget ran %d times; want both undone", err, first.Load())
	}
	if _, err := os.Lstat(n.Dir(token2)); err != nil || second.Load() != 0 || !n.Expecting("vm--b") {
		t.Errorf("the second preparation: dir %v, onForget ran %d times; want it in place", err, second.Load())
	}
}

// TestExpectFailsCleanly: a socket dir that cannot be made (the socket
// directory's parent gone) is an error, and nothing is expected.
func TestExpectFailsCleanly(t *testing.T) {
	n := startNode(t, writePKI(t), nil)
	if err := os.RemoveAll(n.Config().SocketDir); err != nil {
		t.Fatal(err)
	}
	called := false
	if _, err := n.Expect("vm--b", os.Getuid(), os.Getgid(), func() { called = true }); err == nil {
		t.Fatal("no error")
	}
	if n.Expecting("vm--b") || called {
		t.Errorf("after a failed Expect: expecting %v, onForget ran %v", n.Expecting("vm--b"), called)
	}
}
