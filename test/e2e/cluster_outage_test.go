package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// checkAPIServerOutage: kube-apiserver stopped and started again under a
// running node agent. Meanwhile the VM keeps its qemu, and a change made
// on the node (the VM paused with crimuxctl, against its declared
// crimux.io/power-state Running) is undone once the API server is back,
// once; no request already done (snapshot, restore, reboot) is done, or
// announced, again.
func checkAPIServerOutage(t *testing.T, c *daemonRun, v vmPodRef) {
	t.Helper()
	domain := domainOf(v.ctrID)
	qemu := qemuPID(t, domain)
	before := eventReasons(t, v)

	stopAPIServer(t)
	t.Cleanup(func() { startAPIServer(t) }) // a failed test leaves the cluster up for the next
	c.ctlOK(t, ctlBin(t), "vm", "power", v.ctrID, "Paused")
	time.Sleep(20 * time.Second) // the agent's watch is broken; its reflector retries
	if st := virsh(t, "domstate", domain); st != "paused" {
		t.Fatalf("with the API server down: domstate %q, want paused (the agent cannot have read anything)", st)
	}
	if pid := qemuPID(t, domain); pid != qemu {
		t.Fatalf("with the API server down the VM's qemu changed: pid %d, was %d", pid, qemu)
	}

	start := time.Now()
	startAPIServer(t)
	testutil.Eventually(t, 3*time.Minute, "the declared power state Running applied again", func() error {
		if st := virsh(t, "domstate", domain); st != "running" {
			return fmt.Errorf("domstate %q", st)
		}
		return nil
	})
	t.Logf("API server back: the VM paused meanwhile runs again after %v", time.Since(start).Round(time.Second))
	time.Sleep(15 * time.Second) // room for anything done twice to show
	after := eventReasons(t, v)
	for _, reason := range []string{"SnapshotCreated", "SnapshotRestored", "Rebooted", "InvalidPowerState"} {
		if after[reason] != before[reason] {
			t.Errorf("event %s: %d before the outage, %d after; want no request done or announced again", reason, before[reason], after[reason])
		}
	}
	if got, want := after["PowerStateChanged"], before["PowerStateChanged"]+1; got != want {
		t.Errorf("PowerStateChanged events: %d, want %d (Paused -> Running, once)", got, want)
	}
	p, err := getPod(v.k8s, v.name)
	if err != nil {
		t.Fatal(err)
	}
	v.requireSameContainer(t, p, "after the API server outage")
	if pid := qemuPID(t, domain); pid != qemu {
		t.Fatalf("after the API server outage the VM's qemu changed: pid %d, was %d", pid, qemu)
	}
}

// eventReasons counts the pod's events by reason.
func eventReasons(t *testing.T, v vmPodRef) map[string]int {
	t.Helper()
	out := kubectl(t, v.k8s, "-n", clusterNamespace, "get", "events", "--field-selector", "involvedObject.name="+v.name,
		"-o", "jsonpath={.items[*].reason}")
	counts := map[string]int{}
	for _, r := range strings.Fields(out) {
		counts[r]++
	}
	return counts
}

// stopAPIServer kills the test bed's kube-apiserver (etcd keeps running).
func stopAPIServer(t *testing.T) {
	t.Helper()
	// test/cluster/lib.sh's APISERVER_PID, of CLUSTER_INSTANCE's cluster.
	b, err := os.ReadFile(filepath.Join(bed.runDir, "kube-apiserver"+instanceSuffix(os.Getenv("CLUSTER_INSTANCE"))+".pid"))
	if err != nil {
		t.Fatalf("kube-apiserver's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("kube-apiserver's pid file: %v", err)
	}
	// SIGKILL, as a crash or a node losing its control plane would: a
	// SIGTERM makes kube-apiserver drain its requests for up to a minute.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("stop kube-apiserver %d: %v", pid, err)
	}
	testutil.Eventually(t, time.Minute, "kube-apiserver gone", func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("pid %d still there", pid)
		}
		return nil
	})
}

// startAPIServer starts whatever part of the test bed's cluster is not
// running (here: kube-apiserver, on the same etcd) and waits until it is
// ready.
func startAPIServer(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "cluster", "up.sh"))
	cmd.Env = append(os.Environ(), "TESTBED="+bed.testbed)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("test/cluster/up.sh: %v\n%s", err, out)
	}
}
