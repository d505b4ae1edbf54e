package vmfiles_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// TestDialConsoleRefusesAPlantedLink: a compromised qemu replaces its
// console socket with a link to another socket (containerd's, say):
// DialConsole, which Attach calls as root, must refuse, and the other
// socket must see no connection.
func TestDialConsoleRefusesAPlantedLink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vm")
	if err := vmfiles.MakeVMDir(dir, nil); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim.sock")
	lis, err := net.Listen("unix", victim)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	if err := os.Symlink(victim, vmfiles.ConsoleSocket(dir)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if conn, err := vmfiles.DialConsole(ctx, dir); err == nil {
		conn.Close()
		t.Fatal("DialConsole followed a link planted in qemu's run dir")
	}
	select {
	case <-accepted:
		t.Fatal("the victim socket got a connection")
	case <-time.After(100 * time.Millisecond):
	}
	// The real socket is reached.
	os.Remove(vmfiles.ConsoleSocket(dir))
	own, err := net.Listen("unix", vmfiles.ConsoleSocket(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	conn, err := vmfiles.DialConsole(ctx, dir)
	if err != nil {
		t.Fatalf("DialConsole of a real socket: %v", err)
	}
	conn.Close()
}

// TestMakePodDir: a pod's directory and <state>/pods are root's, 0711,
// whatever the umask; a directory that exists is kept, its files too.
func TestMakePodDir(t *testing.T) {
	state := t.TempDir()
	dir := vmfiles.PodDir(state, "sb")
	if want := filepath.Join(state, vmfiles.PodsDir, "sb"); dir != want {
		t.Fatalf("PodDir %s, want %s", dir, want)
	}
	if err := vmfiles.MakePodDir(dir); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, vmfiles.DiskFile)
	if err := os.WriteFile(kept, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := vmfiles.MakePodDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o711 {
			t.Errorf("%s: mode %v, want 0711", d, fi.Mode().Perm())
		}
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("a file of the pod's directory went: %v", err)
	}
}

// sandboxes are pod records by ID.
type sandboxes map[string]*store.Sandbox

func (s sandboxes) Sandbox(id string) (*store.Sandbox, error) {
	if sb, ok := s[id]; ok {
		return sb, nil
	}
	return nil, errors.New("no such pod")
}

// TestDiskPathOf: a VM boots its root volume's disk, else its pod's root
// disk, else (made by an older crimux) the disk in its own directory.
func TestDiskPathOf(t *testing.T) {
	pods := sandboxes{"sb": {ID: "sb", Disk: &store.PodDisk{Path: "/state/pods/sb/disk.qcow2"}}, "bare": {ID: "bare"}}
	for _, tc := range []struct {
		name string
		c    *store.Container
		want string
	}{
		{"root volume", &store.Container{SandboxID: "sb", Dir: "/state/vms/a", RootVolume: &store.RootVolume{Path: "/state/vms/a/root-volume"}}, "/state/vms/a/root-volume"},
		{"pod disk", &store.Container{SandboxID: "sb", Dir: "/state/vms/b"}, "/state/pods/sb/disk.qcow2"},
		{"pod without a disk", &store.Container{SandboxID: "bare", Dir: "/state/vms/c"}, "/state/vms/c/disk.qcow2"},
		{"no pod record", &store.Container{SandboxID: "gone", Dir: "/state/vms/d"}, "/state/vms/d/disk.qcow2"},
	} {
		if got := vmfiles.DiskPathOf(pods, tc.c); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestDialConsoleOfAnOlderVM: a VM made before run/ existed has its
// console socket in its directory itself.
func TestDialConsoleOfAnOlderVM(t *testing.T) {
	dir := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(dir, vmfiles.ConsoleSocketFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := vmfiles.DialConsole(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if _, err := vmfiles.DialConsole(ctx, filepath.Join(dir, "none")); err == nil {
		t.Fatal("DialConsole of a VM without a socket succeeded")
	}
}
