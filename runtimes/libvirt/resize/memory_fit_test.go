package resize

import (
	"errors"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestFitMemory: a VM never gets more RAM than its pod's cgroup leaves
// after qemu's own memory: with the pod overhead it is as asked; without
// it the guest gets the limit less qemu's overhead; when even that is too
// small, it is refused naming the numbers and the fix. Huge pages are not
// charged to the limit: it must hold qemu alone. A limit that cannot be
// read, or no pod cgroup, leaves the VM as asked.
func TestFitMemory(t *testing.T) {
	t.Parallel()
	const parent = "/kubepods/podsb"
	huge := vm.HugePages{PageKiB: 2048, Bytes: 1 << 30}
	for _, tc := range []struct {
		name      string
		parent    string
		res       vm.Resources
		room      int64 // the pod cgroup's limit, MiB; 0: none
		fail      error
		wantRAM   uint64
		wantError string
	}{
		{name: "no pod cgroup", res: vm.Resources{MemoryMiB: 256}, room: 128, wantRAM: 256},
		{name: "no pod limit", parent: parent, res: vm.Resources{MemoryMiB: 256}, wantRAM: 256},
		{name: "limit unreadable", parent: parent, res: vm.Resources{MemoryMiB: 256}, room: 128, fail: errors.New("boom"), wantRAM: 256},
		{name: "with the RuntimeClass overhead", parent: parent, res: vm.Resources{MemoryMiB: 256}, room: 256 + 64, wantRAM: 256},
		{name: "no overhead: the guest gets the rest", parent: parent, res: vm.Resources{MemoryMiB: 512}, room: 512, wantRAM: 512 - 64},
		{name: "no overhead, too small", parent: parent, res: vm.Resources{MemoryMiB: 128}, room: 128,
			wantError: "the pod's cgroup allows 128 MiB of memory, and a VM of 128 MiB of RAM needs 64 MiB more for qemu"},
		{name: "huge pages, room for qemu", parent: parent, res: vm.Resources{MemoryMiB: 1024, HugePages: huge}, room: 64, wantRAM: 1024},
		{name: "huge pages, no room for qemu", parent: parent, res: vm.Resources{MemoryMiB: 1024, HugePages: huge}, room: 32,
			wantError: "the pod's cgroup allows 32 MiB of memory, and qemu needs 64 MiB besides the guest's huge pages"},
	} {
		cg := &coretest.Cgroups{Fail: tc.fail}
		if tc.room > 0 {
			cg.Rooms = map[string]int64{parent: tc.room << 20}
		}
		got, err := FitMemory(cg, &core.Options{MemoryOverheadMiB: 64}, coretest.Logger(), tc.parent, tc.res)
		if tc.wantError != "" {
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.wantError) ||
				!strings.Contains(err.Error(), "RuntimeClass vm") {
				t.Errorf("%s: %v, want FailedPrecondition saying %q and the fix", tc.name, err, tc.wantError)
			}
			continue
		}
		if err != nil || got.MemoryMiB != tc.wantRAM {
			t.Errorf("%s: VM RAM %d MiB (%v), want %d", tc.name, got.MemoryMiB, err, tc.wantRAM)
		}
	}
}
