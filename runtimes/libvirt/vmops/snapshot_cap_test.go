package vmops

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/vmtypes"
)

// TestSnapshotCap: a VM has at most max_snapshots_per_vm snapshots (each
// holds RAM and disk changes inside the pod's disk). One more is refused,
// ResourceExhausted naming the cap, before anything is asked of libvirt or
// recorded as under way (the node agent's before-act hook); deleting one
// makes room again. A duplicate name is still AlreadyExists.
func TestSnapshotCap(t *testing.T) {
	t.Parallel()
	e, c := snapEnv(t, vmtypes.PowerRunning)
	e.R.Opts.MaxSnapshotsPerVM = 2
	ctx := context.Background()
	for _, name := range []string{"s1", "s2"} {
		if _, err := e.ops.CreateSnapshot(ctx, "c1", name, ""); err != nil {
			t.Fatalf("snapshot %s under the cap: %v", name, err)
		}
	}
	acted := false
	hooked := vmtypes.WithBeforeAct(ctx, func() error { acted = true; return nil })
	creates := e.Libvirt.Calls("CreateSnapshot")
	_, err := e.ops.CreateSnapshot(hooked, "c1", "s3", "")
	wantCode(t, err, codes.ResourceExhausted, "the VM has 2 snapshots, its cap (libvirt.max_snapshots_per_vm = 2)")
	if acted || e.Libvirt.Calls("CreateSnapshot") != creates {
		t.Fatalf("a refused snapshot: before-act hook ran %v, libvirt asked %d times; want neither", acted, e.Libvirt.Calls("CreateSnapshot")-creates)
	}
	if _, ok := e.domain(t, c).Snapshots["s3"]; ok {
		t.Fatal("the refused snapshot exists")
	}
	_, err = e.ops.CreateSnapshot(ctx, "c1", "s2", "")
	wantCode(t, err, codes.AlreadyExists, `snapshot_name "s2"`)

	if err := e.ops.DeleteSnapshot(ctx, "c1", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.CreateSnapshot(ctx, "c1", "s3", ""); err != nil {
		t.Fatalf("a snapshot once one was deleted: %v", err)
	}
}

// TestSnapshotCapDefault: without a configured cap, a VM has at most
// DefaultMaxSnapshotsPerVM snapshots.
func TestSnapshotCapDefault(t *testing.T) {
	t.Parallel()
	e, _ := snapEnv(t, vmtypes.PowerShutdown)
	ctx := context.Background()
	for i := range 8 {
		if _, err := e.ops.CreateSnapshot(ctx, "c1", fmt.Sprintf("s%d", i), ""); err != nil {
			t.Fatalf("snapshot %d under the default cap: %v", i, err)
		}
	}
	_, err := e.ops.CreateSnapshot(ctx, "c1", "one-more", "")
	wantCode(t, err, codes.ResourceExhausted, "libvirt.max_snapshots_per_vm = 8")
}

// TestDeleteSnapshotAnnounced: a delete runs the before-act hook once its
// checks pass, just before libvirt is asked (the node agent records the
// request started then); a delete of a snapshot that does not exist runs
// it not at all.
func TestDeleteSnapshotAnnounced(t *testing.T) {
	t.Parallel()
	e, _ := snapEnv(t, vmtypes.PowerRunning)
	ctx := context.Background()
	if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
		t.Fatal(err)
	}
	acted := 0
	hooked := vmtypes.WithBeforeAct(ctx, func() error { acted++; return nil })
	if err := e.ops.DeleteSnapshot(hooked, "c1", "nope"); err == nil || acted != 0 {
		t.Fatalf("delete of a missing snapshot: %v, before-act hook ran %d times; want an error and none", err, acted)
	}
	if err := e.ops.DeleteSnapshot(hooked, "c1", "s1"); err != nil || acted != 1 {
		t.Fatalf("delete of s1: %v, before-act hook ran %d times; want once", err, acted)
	}
}

// TestSnapshotCapReloaded: a reload changes the cap of running VMs: a
// raised one lets the next snapshot through, a lowered one keeps the
// snapshots taken and refuses the next.
func TestSnapshotCapReloaded(t *testing.T) {
	t.Parallel()
	e, _ := snapEnv(t, vmtypes.PowerRunning)
	e.R.Opts.MaxSnapshotsPerVM = 1
	ctx := context.Background()
	if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
		t.Fatal(err)
	}
	_, err := e.ops.CreateSnapshot(ctx, "c1", "s2", "")
	wantCode(t, err, codes.ResourceExhausted, "libvirt.max_snapshots_per_vm = 1")
	e.R.SetMaxSnapshots(3)
	for _, name := range []string{"s2", "s3"} {
		if _, err := e.ops.CreateSnapshot(ctx, "c1", name, ""); err != nil {
			t.Fatalf("snapshot %s under the reloaded cap of 3: %v", name, err)
		}
	}
	e.R.SetMaxSnapshots(2)
	_, err = e.ops.CreateSnapshot(ctx, "c1", "s4", "")
	wantCode(t, err, codes.ResourceExhausted, "the VM has 3 snapshots, its cap (libvirt.max_snapshots_per_vm = 2)")
}
