package libvirt

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// ImageFsUsage counts the image cache, the VMs' directories and the pods'
// root disks, not the rest of the state dir (the store).
func TestImageFsUsage(t *testing.T) {
	state := t.TempDir()
	for path, size := range map[string]int{
		"images/sha256-aa/disk.qcow2": 3 << 20,
		"vms/c1/console.log":          8 << 10,
		"pods/p1/disk.qcow2":          1 << 20,
		"vm.db":                       5 << 20,
	} {
		p := filepath.Join(state, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rt := &Runtime{core: core.New(core.Options{StateDir: state}, core.Parts{Log: coretest.Logger()})}
	got, err := rt.ImageFsUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, err := fsusage.Measure(context.Background(), filepath.Join(state, "images"), filepath.Join(state, "vms"), filepath.Join(state, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	if got.GetFsId().GetMountpoint() != state || got.GetUsedBytes().GetValue() != want.Bytes || got.GetInodesUsed().GetValue() != want.Inodes {
		t.Fatalf("ImageFsUsage = %v, want %d bytes and %d inodes under %s", got, want.Bytes, want.Inodes, state)
	}
	if got.GetUsedBytes().GetValue() < 4<<20 || got.GetUsedBytes().GetValue() >= 9<<20 {
		t.Fatalf("ImageFsUsage counts %d bytes: want the cache, VM and pod files (4 MiB and a bit), not the store", got.GetUsedBytes().GetValue())
	}
}
