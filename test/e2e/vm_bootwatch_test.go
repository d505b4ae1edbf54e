package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

const stuckImage = "127.0.0.1:5117/crimux/vm-stuck:latest"

// ctrStatus is what crictl inspect tells of a container's state.
type ctrStatus struct {
	Status struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"status"`
}

func inspectCtr(t *testing.T, c *crimux, id string) ctrStatus {
	t.Helper()
	var st ctrStatus
	if err := json.Unmarshal([]byte(c.crictl("inspect", "-o", "json", id)), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGuestNotBootedIsVisible: a VM whose guest never gets past
// its boot sector (crimux/vm-stuck: SeaBIOS boots a sector that halts) is
// not only Running: once [libvirt] guest_boot_timeout has passed with no
// sign of an operating system, its CRI status says GuestNotBooted (crictl
// inspect) and its log (crictl logs) says why; a guest that boots (the
// busybox test VM, started beside it) is told nothing.
func TestGuestNotBootedIsVisible(t *testing.T) {
	parallel(t)
	requireVM(t)
	cfg := filepath.Join(t.TempDir(), "crimux.toml")
	if err := os.WriteFile(cfg, []byte("[libvirt]\nguest_boot_timeout = \"10s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCrimux(t, bed.containerd, "--config", cfg, "--vm-accel", "tcg")
	start := func(name, image string) string {
		pod := vmPodJSON(t, name, testCgroupParent(t), "")
		podID := c.crictl("runp", "--runtime", "vm", pod)
		t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
		c.crictl("pull", image)
		ctr := c.crictl("create", podID, vmContainerJSON(t, image, vmMemory, ""), pod)
		c.crictl("start", ctr)
		return ctr
	}
	c.crictl("pull", stuckImage)
	started := time.Now() // before the stuck VM starts: a bound below
	stuck := start("vm-stuck", stuckImage)
	booting := start("vm-boots", vmImage)

	testutil.Eventually(t, within(t, 2*time.Minute), "the stuck VM's status to say GuestNotBooted", func() error {
		if st := inspectCtr(t, c, stuck).Status; st.Reason != "GuestNotBooted" {
			return fmt.Errorf("state %s, reason %q", st.State, st.Reason)
		}
		return nil
	})
	if took := time.Since(started); took < 10*time.Second {
		t.Fatalf("reported stuck %v after start, before guest_boot_timeout (10s)", took)
	}
	st := inspectCtr(t, c, stuck).Status
	if st.State != "CONTAINER_RUNNING" || !strings.Contains(st.Message, "no sign of the guest's operating system") ||
		!strings.Contains(st.Message, "firmware or boot loader") {
		t.Fatalf("stuck VM: state %s, message %q", st.State, st.Message)
	}
	testutil.Eventually(t, within(t, 30*time.Second), "the note in the stuck VM's log", func() error {
		// crimux's note is on stderr (the console is stdout): crictl logs
		// prints it there, kubectl logs with the console.
		out, err := exec.Command(filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint, "logs", stuck).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "crimux: no sign of the guest's operating system") {
			return fmt.Errorf("crictl logs: %v: %q", err, tail(string(out), 5))
		}
		return nil
	})
	// The busybox guest boots in seconds, but on a loaded host it may
	// still be booting when the stuck one is reported: its boot is waited
	// for, then it must say nothing of a stuck guest.
	testutil.Eventually(t, within(t, 2*time.Minute), "crimux seeing the busybox guest boot", func() error {
		if !strings.Contains(c.logs.String(), "VM guest booted") {
			return fmt.Errorf("not yet:\n%s", tail(c.logs.String(), 10))
		}
		return nil
	})
	if st := inspectCtr(t, c, booting).Status; st.State != "CONTAINER_RUNNING" || st.Reason != "" {
		t.Fatalf("the booting VM: state %s, reason %q (%s)", st.State, st.Reason, st.Message)
	}
}
