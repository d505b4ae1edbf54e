package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// clusterStuckPod is a VM pod whose guest never gets past its boot sector
// (crimux/vm-stuck).
const clusterStuckPod = `apiVersion: v1
kind: Pod
metadata:
  name: vm-stuck
  namespace: ` + clusterNamespace + `
spec:
  nodeName: ` + kubeletNode + `
  runtimeClassName: vm
  containers:
  - name: vm
    image: ` + stuckImage + `
    imagePullPolicy: IfNotPresent
    resources:
      limits: {cpu: "1", memory: 128Mi}
`

// checkGuestNotBootedEvent: the stuck VM pod is Running, and the node
// agent has said on it, with a Warning event GuestNotBooted, that its
// guest showed no operating system within guest_boot_timeout (30 s here);
// kubectl logs shows crimux's note. The pod is deleted after.
func checkGuestNotBootedEvent(t *testing.T, k8s string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "a GuestNotBooted event on vm-stuck", func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "get", "events", "--field-selector",
			"involvedObject.name=vm-stuck,reason=GuestNotBooted", "-o", "jsonpath={range .items[*]}{.type} {.source.component}: {.message}{\"\\n\"}{end}")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.HasPrefix(out, "Warning ") || !strings.Contains(out, "firmware or boot loader") {
			return fmt.Errorf("events: %q", out)
		}
		return nil
	})
	pod, err := getPod(k8s, "vm-stuck")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pod.runningID(); err != nil {
		t.Fatalf("vm-stuck: %v", err)
	}
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", "vm-stuck"); !strings.Contains(logs, "crimux: no sign of the guest's operating system") {
		t.Fatalf("kubectl logs vm-stuck lacks crimux's note:\n%s", tail(logs, 10))
	}
	kubectl(t, k8s, "-n", clusterNamespace, "delete", "pod", "vm-stuck", "--timeout", "2m")
}
