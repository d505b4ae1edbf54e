package vmstorage_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
)

// fakeShares starts no virtiofsd: each share gets one end of a pipe, the
// test keeps the other; it fails at share number failAt (from 1).
type fakeShares struct {
	started []string
	dirs    []string
	peers   []*os.File
	failAt  int
}

func (f *fakeShares) Start(sh vm.Share, dir string, place func(pid int) error) (*os.File, error) {
	f.started = append(f.started, sh.Tag)
	f.dirs = append(f.dirs, dir)
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

// starter is a Starter on a store of its own, with VM vm1 of pod pod1
// sharing dirs; placed records the VMs whose virtiofsd were placed.
func starter(t *testing.T, shares *fakeShares, placed *[]string, dirs ...string) (vmstorage.Starter, string) {
	t.Helper()
	state := t.TempDir()
	st, err := store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &store.Container{ID: "vm1", SandboxID: "pod1", Domain: vm.DomainName("vm1"), Dir: filepath.Join(state, "vms", "vm1"),
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}}
	for i, d := range dirs {
		c.Config.Mounts = append(c.Config.Mounts, &runtimeapi.Mount{ContainerPath: "/m" + string(rune('a'+i)), HostPath: d, Readonly: i == 1})
	}
	if err := st.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	place := func(c *store.Container, pid int) error {
		*placed = append(*placed, c.ID)
		return nil
	}
	return vmstorage.Starter{Store: st, StateDir: state, Shares: shares, Place: place}, c.Domain
}

// TestForDomain: a starting qemu gets one file per share, named by its
// arguments in order after the files before them; each virtiofsd keeps
// its socket in the pod's directory and is placed in its VM's cgroup.
func TestForDomain(t *testing.T) {
	shares := &fakeShares{}
	var placed []string
	s, domain := starter(t, shares, &placed, t.TempDir(), t.TempDir())
	files, args, err := s.ForDomain(domain, func(i int) string { return "{fd" + string(rune('1'+i)) + "}" })
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
	if pod := vmfiles.PodDir(s.StateDir, "pod1"); shares.dirs[0] != pod {
		t.Fatalf("virtiofsd's directory %s, want the pod's %s", shares.dirs[0], pod)
	}
	if strings.Join(placed, ",") != "vm1,vm1" {
		t.Fatalf("placed: %v", placed)
	}
}

// TestForDomainFailure: when one share cannot start, the files already
// made are closed (their virtiofsd would see its qemu gone).
func TestForDomainFailure(t *testing.T) {
	shares := &fakeShares{failAt: 2}
	var placed []string
	s, domain := starter(t, shares, &placed, t.TempDir(), t.TempDir())
	files, args, err := s.ForDomain(domain, func(i int) string { return "{fd}" })
	if err == nil || files != nil || args != nil {
		t.Fatalf("got files %v, args %v, err %v; want an error and nothing", files, args, err)
	}
	if _, werr := shares.peers[0].Write([]byte("x")); werr == nil {
		t.Fatal("the first share's file was left open")
	}
}

// TestForDomainWithoutStorage: a VM without devices or shares gets
// nothing; a domain that is no crimux VM's, or whose record is gone, and
// a share where no virtiofsd runs, are errors.
func TestForDomainWithoutStorage(t *testing.T) {
	var placed []string
	s, domain := starter(t, &fakeShares{}, &placed)
	if files, args, err := s.ForDomain(domain, func(int) string { return "{fd}" }); err != nil || files != nil || args != nil {
		t.Fatalf("got files %v, args %v, err %v; want nothing", files, args, err)
	}
	for _, d := range []string{"other-vm", vm.DomainName("gone")} {
		if _, _, err := s.ForDomain(d, func(int) string { return "{fd}" }); err == nil {
			t.Errorf("%s: no error", d)
		}
	}
	s, domain = starter(t, nil, &placed, t.TempDir())
	s.Shares = nil
	if _, _, err := s.ForDomain(domain, func(int) string { return "{fd}" }); err == nil || !strings.Contains(err.Error(), "no virtiofsd") {
		t.Fatalf("a share without virtiofsd: %v", err)
	}
}

// TestCheckHost: a device that is no block device and a mount source
// that does not exist are refused naming their field.
func TestCheckHost(t *testing.T) {
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
			err := vmstorage.CheckHost(tc.st)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v; want one naming %s", err, tc.field)
			}
		})
	}
}

// TestRequireNoShares: an operation saving a VM's memory is refused while
// the VM shares a directory, naming it; a VM without shares may.
func TestRequireNoShares(t *testing.T) {
	c := &store.Container{Config: &runtimeapi.ContainerConfig{}}
	if err := vmstorage.RequireNoShares(c, "Hibernate"); err != nil {
		t.Fatalf("a VM without shares: %v", err)
	}
	c.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir()}}
	err := vmstorage.RequireNoShares(c, "Hibernate")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/data") {
		t.Fatalf("a VM sharing /data: %v", err)
	}
}

// TestForDomainOpensBlockDevicesOnly: what crimux opens for qemu is
// checked on the descriptor: a device path that holds a regular file by
// now, or nothing, is refused, and no share is started.
func TestForDomainOpensBlockDevicesOnly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{{file, "not a block device"}, {file + ".gone", "no such file"}} {
		shares := &fakeShares{}
		var placed []string
		s, domain := starter(t, shares, &placed, t.TempDir())
		c, err := s.Store.Container("vm1")
		if err != nil {
			t.Fatal(err)
		}
		c.Config.Devices = []*runtimeapi.Device{{HostPath: tc.path, ContainerPath: "/dev/vdb", Permissions: "r"}}
		if err := s.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		files, _, err := s.ForDomain(domain, func(int) string { return "{fd}" })
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/dev/vdb") || files != nil {
			t.Errorf("device %s: files %v, err %v; want an error saying %q", tc.path, files, err, tc.want)
		}
		if len(shares.started) != 0 {
			t.Errorf("device %s: shares started %v", tc.path, shares.started)
		}
	}
}
