package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMStopSignalKill: a VM whose container's stop signal is
// SIGKILL is destroyed at once by a stop with a 30 s timeout: it returns
// within seconds, the exit is 137 Killed, and the guest never heard the
// ACPI power button (the test VM prints CRIMUX-POWEROFF when it does).
func TestVMStopSignalKill(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-sigkill", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctr := writeJSON(t, "vmctr-sigkill.json", fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "stop_signal": 13,
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d}}
}`, vmImage, vmCPUQuota, vmMemory))
	ctrID := c.crictl("create", podID, ctr, pod)
	c.crictl("start", ctrID)
	// Booted: from here the guest would power off on the ACPI button.
	testutil.Eventually(t, within(t, 60*time.Second), "console marker in crictl logs", func() error {
		if out, _ := c.crictlErr("logs", ctrID); !strings.Contains(out, vmMarker) {
			return fmt.Errorf("logs so far: %q", out)
		}
		return nil
	})

	start := time.Now()
	c.crictl("stop", "--timeout", "30", ctrID)
	took := time.Since(start)
	var insp struct {
		Status struct {
			State    string `json:"state"`
			ExitCode int    `json:"exitCode"`
			Reason   string `json:"reason"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &insp)
	if insp.Status.State != "CONTAINER_EXITED" || insp.Status.ExitCode != 137 || insp.Status.Reason != "Killed" {
		t.Fatalf("after stop: %+v, want exited 137 Killed", insp.Status)
	}
	if took > 10*time.Second {
		t.Fatalf("stop with a 30 s timeout took %s; a SIGKILL stop signal destroys the VM at once", took)
	}
	if logs := c.crictl("logs", ctrID); strings.Contains(logs, "CRIMUX-POWEROFF") {
		t.Fatalf("the guest was asked to power off (ACPI):\n%s", logs)
	}
	t.Logf("stop with SIGKILL took %s", took.Round(time.Millisecond))
	c.crictl("rm", ctrID)
	c.crictl("rmp", "-f", podID)
	assertNoVMFiles(t, c)
}
