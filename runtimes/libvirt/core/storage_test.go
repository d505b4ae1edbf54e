package core_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/vmtypes"
)

// fakeShares starts no virtiofsd: each share gets one end of a pipe, the
// test keeps the other; it fails at share number failAt (from 1).
type fakeShares struct {
	started []string
	peers   []*os.File
	failAt  int
}

func (f *fakeShares) Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error) {
	f.started = append(f.started, sh.Tag)
	if len(f.started) == f.failAt {
		return nil, errors.New("virtiofsd refused")
	}
	if err := place(1234); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	f.peers = append(f.peers, w)
	return r, nil
}

func vmWithMounts(t *testing.T, e *coretest.Env, dirs ...string) string {
	t.Helper()
	c := putVM(t, e, "pod1", "vm1", runtimeapi.ContainerState_CONTAINER_CREATED, vmtypes.PowerRunning)
	for i, d := range dirs {
		c.Config.Mounts = append(c.Config.Mounts, &runtimeapi.Mount{ContainerPath: "/m" + string(rune('a'+i)), HostPath: d, Readonly: i == 1})
	}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	return c.Domain
}

// TestStorageForDomain: a starting qemu gets one file per share, named by
// its arguments in order after the files before them.
func TestStorageForDomain(t *testing.T) {
	e := coretest.New(t)
	shares := &fakeShares{}
	e.R.Shares = shares
	domain := vmWithMounts(t, e, t.TempDir(), t.TempDir())
	files, args, err := e.R.StorageForDomain(domain, func(i int) string { return "{fd" + string(rune('1'+i)) + "}" })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	joined := strings.Join(args, " ")
	if len(files) != 2 || !strings.Contains(joined, "socket,id=crimux-fs0,fd={fd1}") || !strings.Contains(joined, "tag=mb") ||
		!strings.Contains(joined, "socket,id=crimux-fs1,fd={fd2}") {
		t.Fatalf("files %d, args %q", len(files), args)
	}
	if strings.Join(shares.started, ",") != "ma,mb" {
		t.Fatalf("shares started: %v", shares.started)
	}
}

// TestStorageForDomainFailure: when one share cannot start, the files
// already made are closed (their virtiofsd would see its qemu gone).
func TestStorageForDomainFailure(t *testing.T) {
	e := coretest.New(t)
	shares := &fakeShares{failAt: 2}
	e.R.Shares = shares
	domain := vmWithMounts(t, e, t.TempDir(), t.TempDir())
	files, args, err := e.R.StorageForDomain(domain, func(i int) string { return "{fd}" })
	if err == nil || files != nil || args != nil {
		t.Fatalf("got files %v, args %v, err %v; want an error and nothing", files, args, err)
	}
	if _, werr := shares.peers[0].Write([]byte("x")); werr == nil {
		t.Fatal("the first share's file was left open")
	}
}

// TestCheckStorageHost: a device that is no block device and a mount
// source that does not exist are refused naming their field.
func TestCheckStorageHost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    vm.Storage
		field string
	}{
		{"char device", vm.Storage{Devices: []vm.BlockDevice{{HostPath: "/dev/null", ContainerPath: "/dev/b", Field: "config.devices[0]"}}}, "config.devices[0].host_path"},
		{"regular file", vm.Storage{Devices: []vm.BlockDevice{{HostPath: "/etc/hostname", ContainerPath: "/dev/b", Field: "config.devices[0]"}}}, "config.devices[0].host_path"},
		{"missing mount source", vm.Storage{Shares: []vm.Share{{HostPath: "/no/such/dir", ContainerPath: "/d", Field: "config.mounts[2]"}}}, "config.mounts[2].host_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := core.CheckStorageHost(tc.st)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v; want one naming %s", err, tc.field)
			}
		})
	}
}
