package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fillGuestMemory reads the guest's disk into its page cache, 64 MiB at
// a time, until the VM pod's memory cgroup holds at least atLeast bytes:
// the guest has then touched that much of its RAM, and qemu keeps it.
// It returns the cgroup's usage. Without this the shrink that follows
// passed or failed on what the guest happened to have touched (CI,
// 2026-12-03: kubelet refused "memory limit (1207959552) below current
// usage" when crimux reported the VM's cgroup as the container's usage).
func fillGuestMemory(t *testing.T, v vmPodRef, atLeast int64) int64 {
	t.Helper()
	usage := filepath.Join("/sys/fs/cgroup/memory", kubeletCgroup, "kubepods", "pod"+v.uid, "memory.usage_in_bytes")
	for skip := 0; skip < 3<<10; skip += 64 { // the guest's disk is 3 GiB
		n := readCgroupInt(t, usage)
		if n >= atLeast {
			return n
		}
		guestRead(t, v, fmt.Sprintf("dd if=/dev/vda of=/dev/null bs=1M count=64 skip=%d 2>&1", skip))
	}
	t.Fatalf("%s below %d after reading the guest's whole disk", usage, atLeast)
	return 0
}

// requireGuestMemoryUsage: what crictl stats reports as the VM
// container's memory is the guest's own account (MemTotal less
// MemAvailable, from its balloon driver), not qemu's cgroup, which holds
// cgroupUsage: a guest that read its disk into its page cache can give
// it back when asked.
func requireGuestMemoryUsage(t *testing.T, c *daemonRun, v vmPodRef, cgroupUsage int64) {
	t.Helper()
	got := int64(c.stat(t, v.ctrID).UsageBytes)
	if got <= 0 || got >= cgroupUsage/2 {
		t.Fatalf("crictl stats: the VM container's memory usage %d, want the guest's (> 0, well below the cgroup's %d)",
			got, cgroupUsage)
	}
	t.Logf("memory usage: the guest's %d MiB as the container's, qemu's cgroup %d MiB", got>>20, cgroupUsage>>20)
}

func readCgroupInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}
