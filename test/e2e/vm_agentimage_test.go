package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// vmAgentImage is the test VM with Debian's qemu-guest-agent in its
// initramfs (test/images/vmagent.go): exec and resize where the Debian
// guest costs too much (the cgroup-v2 node's kubelet scenarios).
const vmAgentImage = "127.0.0.1:5117/crimux/vm-busybox-agent:latest"

// TestVMAgentImage: crimux/vm-busybox-agent boots, its guest agent answers
// crictl exec (output and exit code), and crictl update grows its vCPUs
// through the agent: the image the node's kubelet scenarios rely on.
func TestVMAgentImage(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmAgentImage)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-agent", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmAgentImage, vmMemory, ""), pod)
	c.crictl("start", ctrID)
	start := time.Now()
	var out string
	testutil.Eventually(t, within(t, 2*time.Minute), "crictl exec through the guest agent", func() error {
		var err error
		out, err = c.crictlErr("exec", "-s", ctrID, "cat", "/etc/os-release")
		if err == nil && !strings.Contains(out, "crimux-test-vm") {
			err = fmt.Errorf("os-release %q", out)
		}
		return err
	})
	t.Logf("crictl exec answered %v after crictl start", time.Since(start).Round(100*time.Millisecond))
	out, err := c.crictlErr("exec", ctrID, "sh", "-c", "echo out; exit 3")
	if err == nil || !strings.HasPrefix(out, "out") || !strings.Contains(out, "exit code 3") {
		t.Fatalf("crictl exec sh -c 'echo out; exit 3': %v, %q; want its output and exit code 3 reported", err, out)
	}
	if logs := c.crictl("logs", ctrID); !strings.Contains(logs, "CRIMUX-AGENT: /dev/vport") {
		t.Fatalf("the console lacks the agent's start line:\n%s", tail(logs, 20))
	}
}
