package criservice

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestVMFitsInItsPod: a VM never gets more RAM than its pod's
// cgroup leaves after qemu's own memory: with the pod overhead it is as
// asked; without it the guest gets the limit less qemu's overhead; when
// even that is too small, it is refused up front naming the numbers and
// the fix, and nothing is left.
func TestVMFitsInItsPod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limitMiB  int64 // the container's memory limit
		room      int64 // the pod cgroup's limit, MiB; 0: none
		wantRAM   uint64
		wantError string
	}{
		{name: "no pod limit", limitMiB: 256, wantRAM: 256},
		{name: "with the RuntimeClass overhead", limitMiB: 256, room: 256 + 64, wantRAM: 256},
		{name: "no overhead: the guest gets the rest", limitMiB: 512, room: 512, wantRAM: 512 - 64},
		{name: "no overhead, too small", limitMiB: 128, room: 128,
			wantError: "the pod's cgroup allows 128 MiB of memory, and a VM of 128 MiB of RAM needs 64 MiB more for qemu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := coretest.New(t) // memory_overhead_mib 64
			s := serviceOn(e)
			sb := e.PutPod(t, "sb", nil)
			if tc.room > 0 {
				e.Cgroups.Rooms = map[string]int64{sb.Config.GetLinux().GetCgroupParent(): tc.room << 20}
			}
			cfg := bombTestConfig("vm")
			cfg.Linux.Resources.MemoryLimitInBytes = tc.limitMiB << 20
			resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "sb", Config: cfg})
			if tc.wantError != "" {
				if errdefs.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.wantError) ||
					!strings.Contains(err.Error(), "RuntimeClass vm") {
					t.Fatalf("CreateContainer: %v, want FailedPrecondition saying %q and the fix", err, tc.wantError)
				}
				if recs, _ := e.R.Store.Containers(); len(recs) != 0 || len(e.Libvirt.Names()) != 0 {
					t.Fatalf("left behind: %d records, domains %v", len(recs), e.Libvirt.Names())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := e.R.Store.Container(resp.GetContainerId())
			if err != nil || c.MemoryMiB != tc.wantRAM {
				t.Fatalf("VM RAM %d MiB (%v), want %d", c.MemoryMiB, err, tc.wantRAM)
			}
		})
	}
}
