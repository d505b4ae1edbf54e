package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The node tests (CRIMUX_E2E_NODE=1, make e2e-node) run inside the test
// node test/node/up.sh booted: Debian 12 with systemd as init on cgroup v2,
// containerd with the systemd cgroup driver, crimux installed by make
// install and run by its unit. Every command goes through test/node/run.sh
// (SSH as root); the node's crictl talks to crimux (/etc/crictl.yaml).

func requireNode(t *testing.T) {
	t.Helper()
	if os.Getenv("CRIMUX_E2E_NODE") != "1" {
		t.Skip("CRIMUX_E2E_NODE is not 1: make e2e-node boots the node and runs these")
	}
	if _, err := nodeTry("true"); err != nil {
		t.Fatalf("the test node does not answer (test/node/up.sh): %v", err)
	}
}

// nodeTry runs a shell script in the node and returns its output.
func nodeTry(script string) (string, error) {
	return runNode("set -eu\n" + script)
}

// runNode runs test/node/run.sh with args (a script, or --put/--get).
func runNode(args ...string) (string, error) {
	run, err := filepath.Abs("../node/run.sh")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(run, args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("%w: %s", err, s)
	}
	return s, nil
}

// nodeRun runs a script in the node and fails the test if it fails.
func nodeRun(t *testing.T, script string) string {
	t.Helper()
	out, err := nodeTry(script)
	if err != nil {
		t.Fatalf("in the node: %s\n%v", script, err)
	}
	return out
}

// nodeWait retries script in the node until it succeeds or timeout
// (slowed) passes.
func nodeWait(t *testing.T, timeout time.Duration, what, script string) string {
	t.Helper()
	timeout = slowed(timeout)
	deadline := time.Now().Add(timeout)
	for {
		out, err := nodeTry(script)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// nodeFile reads one file of the node, trimmed.
func nodeFile(t *testing.T, path string) string {
	t.Helper()
	return nodeRun(t, "cat "+path)
}

// timed runs a script in the node, logs how long it took and returns its
// output.
func timed(t *testing.T, what, script string) string {
	t.Helper()
	start := time.Now()
	out := nodeRun(t, script)
	t.Logf("TIME %s: %.1fs", what, time.Since(start).Seconds())
	return out
}

// podSlicePath is where systemd puts a kubepods-<qos>-pod<uid>.slice.
func podSlicePath(qos, uid string) string {
	return fmt.Sprintf("/sys/fs/cgroup/kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice", qos, qos, uid)
}

// makePodSlice makes the pod's slice the way kubelet's systemd driver
// does (a transient slice unit with the pod's limits), before the pod
// runs.
func makePodSlice(t *testing.T, qos, uid string, memMax int64) {
	t.Helper()
	call := "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' "
	nodeRun(t, fmt.Sprintf("%s kubepods-%s-pod%s.slice fail 2 MemoryMax t %d CPUWeight t 100 0 >/dev/null", call, qos, uid, memMax))
	nodeWait(t, 10*time.Second, "pod slice", "test -d "+podSlicePath(qos, uid))
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// step is one of a node test's steps: they share the node and run in
// order, as subtests (make e2e-node counts them).
type step struct {
	name string
	run  func(t *testing.T)
}

// runSteps runs steps in order; once one fails, the rest are skipped
// (each builds on what the one before left).
func runSteps(t *testing.T, steps []step) {
	failed := false
	for _, s := range steps {
		if failed {
			t.Run(s.name, func(t *testing.T) { t.Skip("an earlier step failed") })
			continue
		}
		failed = !t.Run(s.name, s.run)
	}
}
