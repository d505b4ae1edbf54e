package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMMetrics: crimux's metrics carry each VM's series under its pod's
// namespace and name and its container's name: its power state, the CPU
// and memory of its cgroup, its disk and network traffic; once the pod is
// removed, none of its series is left.
func TestVMMetrics(t *testing.T) {
	parallel(t)
	requireVM(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--metrics-address", addr)
	c.crictl("pull", vmImage)
	podID, _ := runVM(t, c, "vm-metrics", testCgroupParent(t))
	scrape := func() string { return scrapeMetrics(t, addr) }
	labels := `{container="vm",namespace="crimux-e2e",pod="vm-metrics"}`
	testutil.Eventually(t, within(t, 30*time.Second), "the VM's series", func() error {
		text := scrape()
		for _, s := range []struct {
			series  string
			nonZero bool
		}{
			{`crimux_vm_power_state{container="vm",namespace="crimux-e2e",pod="vm-metrics",power_state="running"}`, true},
			{"crimux_vm_cpu_seconds_total" + labels, true},
			{"crimux_vm_memory_working_set_bytes" + labels, true},
			{"crimux_vm_block_read_bytes_total" + labels, true},
			{"crimux_vm_block_write_bytes_total" + labels, false},
			{"crimux_vm_network_receive_bytes_total" + labels, false},
			{"crimux_vm_network_transmit_bytes_total" + labels, false},
		} {
			if err := hasSample(text, s.series, s.nonZero); err != nil {
				return err
			}
		}
		return nil
	})
	c.crictl("rmp", "-f", podID)
	if text := scrape(); strings.Contains(text, `pod="vm-metrics"`) {
		t.Fatalf("series of the removed VM pod are left:\n%s", grepLines(text, `pod="vm-metrics"`))
	}
}

// grepLines are text's lines holding s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
