package criservice

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
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
	run, err := os.Lstat(filepath.Join(dir, vmfiles.RunDir))
	if err != nil {
		t.Fatal(err)
	}
	wantUID := uint32(0)
	if u, err := user.Lookup(vmfiles.QemuUser); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		wantUID = uint32(uid)
	}
	if st := run.Sys().(*syscall.Stat_t); st.Uid != wantUID || run.Mode().Perm() != 0o700 || !run.IsDir() {
		t.Fatalf("run dir: uid %d mode %v, want uid %d, 0700", st.Uid, run.Mode(), wantUID)
	}
}
