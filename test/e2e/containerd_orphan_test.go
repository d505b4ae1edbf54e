package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestOrphanedTaskReaped: a task runs in containerd's CRI namespace under
// the cgroup parent of a pod made through crimux, but containerd's CRI
// does not know it — what containerd 2.4 leaves when a RunPodSandbox is
// cancelled half way (crimux SIGKILLed: make chaos found one). It is made
// here with ctr, as containerd's task API sees it. crimux's sweep at its
// next start ends the task and removes its cgroup, and leaves the pod's own
// container, which containerd's CRI knows, running.
func TestOrphanedTaskReaped(t *testing.T) {
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	c.crictl("pull", busyboxImage)
	parent := testCgroupParent(t)
	pod := writeJSON(t, "pod.json", fmt.Sprintf(`{
  "metadata": {"name": "orphan-parent", "namespace": "crimux-e2e", "uid": "orphan-parent-uid"},
  "log_directory": %q,
  "linux": {"cgroup_parent": %q}
}`, t.TempDir(), parent))
	podID := c.crictl("runp", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, containerJSON(t, "sleeper", busyboxImage, []string{"sleep", "3600"}), pod)
	c.crictl("start", ctrID)

	var b [32]byte
	_, _ = rand.Read(b[:])
	orphan := hex.EncodeToString(b[:])
	ctr(t, "run", "-d", "--cgroup", parent+"/"+orphan, busyboxImage, orphan, "sleep", "3600")
	t.Cleanup(func() {
		ctrErr("task", "kill", "-s", "SIGKILL", orphan)
		time.Sleep(200 * time.Millisecond)
		ctrErr("task", "rm", "-f", orphan)
		ctrErr("container", "rm", orphan)
	})
	leaves := cgroupDirs(parent + "/" + orphan)
	if !anyExists(leaves) {
		t.Fatalf("the orphan's cgroup %s/%s is in no hierarchy", parent, orphan)
	}
	// The sweep leaves cgroups younger than ten seconds alone (runc may be
	// setting them up); then crimux restarts and sweeps at once.
	time.Sleep(11 * time.Second)
	c.restart()
	testutil.Eventually(t, 20*time.Second, "the orphaned task ended and its cgroup removed", func() error {
		if out, _ := ctrErr("task", "ls", "-q"); strings.Contains(out, orphan) {
			return fmt.Errorf("task %s still listed", orphan)
		}
		if out, _ := ctrErr("container", "ls", "-q"); strings.Contains(out, orphan) {
			return fmt.Errorf("container %s still listed", orphan)
		}
		if anyExists(leaves) {
			return fmt.Errorf("cgroup %s/%s still there", parent, orphan)
		}
		return nil
	})
	if out := c.crictl("ps", "-q", "--state", "running"); !strings.Contains(out, ctrID) {
		t.Fatalf("the pod's own container %s is no longer running:\n%s", ctrID, out)
	}
}

// ctr runs the bed's ctr in containerd's CRI namespace and fails the test
// on an error.
func ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := ctrErr(args...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func ctrErr(args ...string) (string, error) {
	full := append([]string{"--address", strings.TrimPrefix(bed.containerd, "unix://"), "--namespace", "k8s.io"}, args...)
	out, err := exec.Command(filepath.Join(bed.testbed, "bin", "ctr"), full...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func anyExists(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
