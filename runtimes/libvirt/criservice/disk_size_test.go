package criservice

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// bombTestConfig is a VM container of 128 MiB.
func bombTestConfig(image string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}, Image: &runtimeapi.ImageSpec{Image: image},
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}}}
}

// TestDiskBombRefused: an image whose disk declares more than the cap is
// InvalidArgument naming the size and the cap, and nothing of the VM is
// left; one within the cap is taken.
func TestDiskBombRefused(t *testing.T) {
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	e.Images.Layout = core.ImageLayout{DiskPath: "/images/disk.qcow2", DiskFormat: "qcow2", DiskVirtualSize: 1 << 50}
	_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "sb", Config: bombTestConfig("bomb")})
	if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1125899906842624") || !strings.Contains(err.Error(), "1 PiB") ||
		!strings.Contains(err.Error(), "64 GiB") || !strings.Contains(err.Error(), "config.image.image") {
		t.Fatalf("CreateContainer of a 1 PiB disk: %v, want InvalidArgument naming the size and the cap", err)
	}
	if recs, _ := e.R.Store.Containers(); len(recs) != 0 {
		t.Fatalf("records left: %d", len(recs))
	}
	if dirs, _ := os.ReadDir(filepath.Join(e.Dir, "vms")); len(dirs) != 0 {
		t.Fatalf("VM dirs left: %v", dirs)
	}
	if names := e.Libvirt.Names(); len(names) != 0 {
		t.Fatalf("domains left: %v", names)
	}
	e.R.Opts.MaxDiskVirtualSize = 2 << 50
	if err := s.checkDiskSize("bomb", e.Images.Layout, nil); err != nil {
		t.Fatalf("a disk within a raised cap: %v", err)
	}
}

// TestWritableLayerIsTheOverlay: ContainerStats reports the overlay's
// allocated bytes as the writable layer, so kubelet's eviction sees a
// guest filling its disk.
func TestWritableLayerIsTheOverlay(t *testing.T) {
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "sb", nil)
	c := e.PutVM(t, "sb", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	if err := os.WriteFile(filepath.Join(c.Dir, "disk.qcow2"), make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := s.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	wl := resp.GetStats().GetWritableLayer()
	if wl.GetUsedBytes().GetValue() < 3<<20 || wl.GetFsId().GetMountpoint() != e.Dir {
		t.Fatalf("writable layer %+v, want >= 3 MiB on %s", wl, e.Dir)
	}
}
