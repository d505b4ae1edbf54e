package vmops

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/vmtypes"
)

// TestSavingRefusedWithShares: qemu cannot save a VM with virtio-fs
// shares, so Hibernate and a snapshot of a running VM are refused up
// front naming the shares; a shut-down VM's snapshot (disk only) is not.
func TestSavingRefusedWithShares(t *testing.T) {
	e, c := snapEnv(t, vmtypes.PowerRunning)
	c.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir()}}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := e.ops.SetPowerState(ctx, "c1", vmtypes.PowerHibernate, 0)
	wantCode(t, err, codes.FailedPrecondition, "/data")
	if e.domain(t, c).ManagedSave {
		t.Fatal("the VM was saved anyway")
	}
	_, err = e.ops.CreateSnapshot(ctx, "c1", "s1", "")
	wantCode(t, err, codes.FailedPrecondition, "virtio-fs")
	if _, err := e.ops.SetPowerState(ctx, "c1", vmtypes.PowerShutdown, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
		t.Fatalf("a snapshot of the shut-down VM: %v", err)
	}
}
