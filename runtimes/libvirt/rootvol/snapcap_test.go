package rootvol

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
)

// addSnapshots adds internal snapshots s<from>..s<to> to the qcow2 at p,
// as qemu-img makes them.
func addSnapshots(t *testing.T, p string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		sh(t, "qemu-img", "snapshot", "-c", fmt.Sprintf("s%d", i), p)
	}
}

// A qcow2 root disk holding more internal snapshots than a VM may have
// is refused when the cap is given (at create: each would be redefined in
// libvirt), saying how many, the cap and what to do; up to the cap, or
// with a higher cap, it boots.
func TestExamineSnapshotCap(t *testing.T) {
	needTool(t, "qemu-img")
	v := fsVolume(t, vm.FormatQcow2)
	disk := DiskPath(v)
	sh(t, "qemu-img", "create", "-q", "-f", "qcow2", disk, "16M")
	addSnapshots(t, disk, 1, 8)
	capacity, err := Capacity(v)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Examine(v, capacity, MaxSnapshots(8)); err != nil || c.Holds != Disk {
		t.Fatalf("8 snapshots, cap 8: %+v, %v", c, err)
	}
	addSnapshots(t, disk, 9, 9)
	_, err = Examine(v, capacity, MaxSnapshots(8))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("9 snapshots, cap 8: %v, want FailedPrecondition", err)
	}
	for _, want := range []string{v.ContainerPath, disk, "9 internal snapshots", "max_snapshots_per_vm = 8", "qemu-img snapshot -d"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("9 snapshots, cap 8: the error does not say %q: %v", want, err)
		}
	}
	if c, err := Examine(v, capacity, MaxSnapshots(16)); err != nil || c.Holds != Disk {
		t.Fatalf("9 snapshots, cap 16: %+v, %v", c, err)
	}
	// Without a cap (a VM already made starting again): as before.
	if c, err := Examine(v, capacity); err != nil || c.Holds != Disk {
		t.Fatalf("9 snapshots, no cap: %+v, %v", c, err)
	}
}
