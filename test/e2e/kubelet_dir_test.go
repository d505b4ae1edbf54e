package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestKubeletKeepsItsFiles: kubelet collects every container no pod of
// its own owns. For one made without a log path (another CRI client's:
// crictl, critest), its log manager then removes every match of
// log_path+"*", that is "*" in kubelet's working directory. CI lost a
// test's kubelet log and its still empty manifests directory so, a second
// after kubelet started; the harness runs kubelet in an empty directory of
// its own. Here a container pod is made without log directory or log
// path before kubelet starts: once kubelet removed it, kubelet's log and
// manifests directory are still there.
func TestKubeletKeepsItsFiles(t *testing.T) {
	bin := os.Getenv("CRIMUX_KUBELET")
	if bin == "" {
		t.Skip("CRIMUX_KUBELET is not set (make e2e-kubelet builds kubelet and sets it)")
	}
	requireBed(t)
	prepareKubeletCgroups(t)
	c := startDaemon(t, containerOnly, nil)
	c.crictl("pull", busyboxImage)
	pod := writeJSON(t, "pod.json", `{"metadata": {"name": "no-log-dir", "namespace": "crimux-kubelet-dir", "uid": "no-log-dir-uid"}, "linux": {}}`)
	podID := c.crictl("runp", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctr := writeJSON(t, "ctr.json", fmt.Sprintf(`{"metadata": {"name": "no-log-path"}, "image": {"image": %q}, "command": ["true"], "linux": {}}`, busyboxImage))
	ctrID := c.crictl("create", podID, ctr, pod)

	k := startKubelet(t, bin, c.endpoint)
	testutil.Eventually(t, 3*time.Minute, "kubelet removing the container no pod of its owns", func() error {
		requireKubeletFiles(t, k)
		out, err := c.crictlErr("ps", "-a", "-q")
		if err != nil {
			return fmt.Errorf("crictl ps: %v: %s", err, out)
		}
		if strings.Contains(out, ctrID) {
			return fmt.Errorf("%s still listed", ctrID)
		}
		return nil
	})
	requireKubeletFiles(t, k)
}

// requireKubeletFiles fails the test when kubelet's log or manifests
// directory has gone.
func requireKubeletFiles(t *testing.T, k *kubeletRun) {
	t.Helper()
	for _, p := range []string{k.logPath, k.manifests} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("kubelet removed %s as the logs of a container without log path: %v", p, err)
		}
	}
}
