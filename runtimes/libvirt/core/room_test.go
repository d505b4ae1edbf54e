package core_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestRequireRoom: a state dir on a filesystem with less than
// the reserve free refuses new VM pods, ResourceExhausted naming the
// directory; freed, it takes them again.
func TestRequireRoom(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (a small tmpfs)")
	}
	e := coretest.New(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=160m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	e.R.Opts.StateDir = dir
	if err := e.R.RequireRoom("RunPodSandbox"); err != nil {
		t.Fatalf("160 MiB free: %v", err)
	}
	if out, err := exec.Command("fallocate", "-l", "100M", dir+"/fill").CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v: %s", err, out)
	}
	err := e.R.RequireRoom("RunPodSandbox")
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "RunPodSandbox") {
		t.Fatalf("60 MiB free: %v", err)
	}
	os.Remove(dir + "/fill")
	if err := e.R.RequireRoom("RunPodSandbox"); err != nil {
		t.Fatalf("freed: %v", err)
	}
}
