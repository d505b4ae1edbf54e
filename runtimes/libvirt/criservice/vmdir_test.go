package criservice

import (
	"context"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestVMDirectoryIsRootOwned: a VM's directory stays root's (0711: qemu
// may open what it is handed, not plant files where crimux reads and
// writes as root); only run/ is the qemu user's.
func TestVMDirectoryIsRootOwned(t *testing.T) {
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "sb", Config: bombTestConfig("vm")})
	if err != nil {
		t.Fatal(err)
	}
	dir := e.R.VMDir(resp.GetContainerId())
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o711 {
		t.Fatalf("VM dir %s: uid %d mode %v, want root's, 0711", dir, st.Uid, fi.Mode().Perm())
	}
	run, err := os.Lstat(filepath.Join(dir, core.RunDir))
	if err != nil {
		t.Fatal(err)
	}
	wantUID := uint32(0)
	if u, err := user.Lookup(core.QemuUser); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		wantUID = uint32(uid)
	}
	if st := run.Sys().(*syscall.Stat_t); st.Uid != wantUID || run.Mode().Perm() != 0o700 || !run.IsDir() {
		t.Fatalf("run dir: uid %d mode %v, want uid %d, 0700", st.Uid, run.Mode(), wantUID)
	}
}

// TestAttachRefusesAPlantedLink: a compromised qemu replaces its console
// socket with a link to another socket (containerd's, say): Attach, which
// dials as root, must refuse, and the other socket must see no connection.
func TestAttachRefusesAPlantedLink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vm")
	if err := core.MakeVMDir(dir, nil); err != nil {
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
	if err := os.Symlink(victim, core.ConsoleSocket(dir)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if conn, err := core.DialConsole(ctx, dir); err == nil {
		conn.Close()
		t.Fatal("DialConsole followed a link planted in qemu's run dir")
	}
	select {
	case <-accepted:
		t.Fatal("the victim socket got a connection")
	case <-time.After(100 * time.Millisecond):
	}
	// The real socket is reached.
	os.Remove(core.ConsoleSocket(dir))
	own, err := net.Listen("unix", core.ConsoleSocket(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	conn, err := core.DialConsole(ctx, dir)
	if err != nil {
		t.Fatalf("DialConsole of a real socket: %v", err)
	}
	conn.Close()
}
