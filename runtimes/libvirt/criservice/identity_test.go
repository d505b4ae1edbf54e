package criservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/qcow2"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// newIsolatedService is a service whose VM pods each get a uid and gid of
// their own, with an image that has a qcow2 disk.
func newIsolatedService(t *testing.T, rg vmidentity.Range) (*Service, *coretest.Env) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chowns VM files: needs root")
	}
	s, e := newService(t, coretest.Options{Identities: rg})
	base := filepath.Join(t.TempDir(), "base.qcow2")
	if err := qcow2.CreateOverlay(base, "/unused", "raw", 1<<20, 0o444); err != nil {
		t.Fatal(err)
	}
	e.Images.Layout = core.ImageLayout{Digest: "sha256:aaaa", DiskPath: base, DiskFormat: "qcow2", DiskVirtualSize: 1 << 20}
	return s, e
}

func ownerOf(t *testing.T, path string) (uint32, uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode().Perm()
}

// TestEachVMPodHasItsOwnIdentity: every VM pod's qemu runs as a uid and
// gid of its own (the domain's static DAC label, relabelling off), and its
// own files, and only those, are that identity's: the root disk, the
// cloud-init ISO, run/ (the console socket's directory).
func TestEachVMPodHasItsOwnIdentity(t *testing.T) {
	s, e := newIsolatedService(t, vmidentity.Range{Base: 500000, Count: 100})
	uids := map[uint32]string{}
	for _, name := range []string{"a", "b", "c"} {
		cfg := podConfig(t, name)
		sb := runPod(t, s, cfg)
		id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
		rec, err := e.R.Store.Sandbox(sb)
		if err != nil || rec.Identity == nil {
			t.Fatalf("pod %s: identity %v, %v", name, rec.Identity, err)
		}
		uid := rec.Identity.UID
		if uid <= 500000 || uid >= 500100 || rec.Identity.GID != uid {
			t.Fatalf("pod %s: identity %+v outside the range", name, rec.Identity)
		}
		if other, dup := uids[uid]; dup {
			t.Fatalf("pods %s and %s share uid %d", other, name, uid)
		}
		uids[uid] = name
		c := e.Record(t, id)
		for _, p := range []string{filepath.Join(vmfiles.PodDir(e.R.Opts.StateDir, sb), vmfiles.DiskFile), filepath.Join(c.Dir, cidata.File), filepath.Join(c.Dir, vmfiles.RunDir)} {
			u, g, mode := ownerOf(t, p)
			if u != uid || g != uid || mode&0o077 != 0 {
				t.Errorf("pod %s: %s is %d:%d %v, want %d:%d and nobody else's", name, p, u, g, mode, uid, uid)
			}
		}
		u, _, _ := ownerOf(t, c.Dir)
		if u != 0 {
			t.Errorf("pod %s: VM dir is uid %d's, want root's", name, u)
		}
		d, _ := e.Libvirt.Domain(c.Domain)
		label := fmt.Sprintf(`<label>+%d:+%d</label>`, uid, uid)
		if !containsAll(d.XML, `<seclabel type="static" model="dac" relabel="no">`, label, `<backingStore type="file">`, e.Images.Layout.DiskPath, `<backingStore></backingStore>`) {
			t.Errorf("pod %s: domain XML lacks its own label or its named chain:\n%s", name, d.XML)
		}
	}
	if u, _, mode := ownerOf(t, e.Images.Layout.DiskPath); u != 0 || mode != 0o444 {
		t.Errorf("the image's disk is %d's, %v: want root's and read-only", u, mode)
	}
}

// TestIdentitiesRunOut: a full range is ResourceExhausted, and a pod's
// number is free again once its record is gone.
func TestIdentitiesRunOut(t *testing.T) {
	s, e := newIsolatedService(t, vmidentity.Range{Base: 600000, Count: 2}) // one number
	cfg := podConfig(t, "a")
	sbA := runPod(t, s, cfg)
	createVM(t, s, sbA, cfg, vmConfig(128, 0, 0))
	cfgB := podConfig(t, "b")
	sbB := runPod(t, s, cfgB)
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sbB, Config: vmConfig(128, 0, 0), SandboxConfig: cfgB})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("second pod with one identity free: %v, want ResourceExhausted", err)
	}
	if _, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sbA}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sbA}); err != nil {
		t.Fatal(err)
	}
	createVM(t, s, sbB, cfgB, vmConfig(128, 0, 0))
	if rec, _ := e.R.Store.Sandbox(sbB); rec.Identity == nil || rec.Identity.UID != 600001 {
		t.Fatalf("pod b after a's removal: identity %+v, want 600001", rec.Identity)
	}
}

// TestStartRefusesARewrittenRootDisk: a compromised qemu rewrites its pod
// disk's header to name a root-only host file as a raw backing file, and
// exits. The next start of the pod's VM (a new container, a power-on, a
// restore) is refused with FailedPrecondition naming the disk, libvirt is
// never asked to start it, and the disk is kept: an Lstat of the disk
// alone does not see the rewrite.
func TestStartRefusesARewrittenRootDisk(t *testing.T) {
	s, e := newIsolatedService(t, vmidentity.Range{Base: 700000, Count: 10})
	cfg := podConfig(t, "a")
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	disk := filepath.Join(vmfiles.PodDir(e.R.Opts.StateDir, sb), vmfiles.DiskFile)
	if err := os.Remove(disk); err != nil {
		t.Fatal(err)
	}
	if err := qcow2.CreateOverlay(disk, "/etc/shadow", "raw", 1<<20, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !containsAll(err.Error(), disk, "/etc/shadow") {
		t.Fatalf("start with a rewritten header: %v, want FailedPrecondition naming the disk and the file", err)
	}
	c := e.Record(t, id)
	d, _ := e.Libvirt.Domain(c.Domain)
	if d.State != virt.StateShutoff {
		t.Fatalf("domain is %v, want never started", d.State)
	}
	if _, err := os.Stat(disk); err != nil {
		t.Fatalf("the disk is not kept for inspection: %v", err)
	}
}
