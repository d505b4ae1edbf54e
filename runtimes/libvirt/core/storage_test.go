package core_test

import (
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/vmtypes"
)

// fakeShares starts no virtiofsd: each share gets one end of a pipe, the
// test keeps the other.
type fakeShares struct{ started []string }

func (f *fakeShares) Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error) {
	f.started = append(f.started, sh.Tag)
	if err := place(1234); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	w.Close()
	return r, nil
}

// TestStorageForDomain: the runtime hands a starting qemu of a VM its
// shares, started by its virtiofsd starter (vmstorage.Starter), named by
// their arguments in order.
func TestStorageForDomain(t *testing.T) {
	e := coretest.New(t)
	shares := &fakeShares{}
	e.R.Shares = shares
	c := putVM(t, e, "pod1", "vm1", runtimeapi.ContainerState_CONTAINER_CREATED, vmtypes.PowerRunning)
	c.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/ma", HostPath: t.TempDir()}, {ContainerPath: "/mb", HostPath: t.TempDir()}}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	files, args, err := e.R.StorageForDomain(c.Domain, func(i int) string { return "{fd" + string(rune('1'+i)) + "}" })
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	joined := strings.Join(args, " ")
	if len(files) != 2 || !strings.Contains(joined, "socket,id=crimux-fs0,fd={fd1}") || !strings.Contains(joined, "socket,id=crimux-fs1,fd={fd2}") {
		t.Fatalf("files %d, args %q", len(files), args)
	}
	if strings.Join(shares.started, ",") != "ma,mb" {
		t.Fatalf("shares started: %v", shares.started)
	}
}
