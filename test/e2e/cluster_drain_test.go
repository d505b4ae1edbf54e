package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// drainDebianPod is the Debian guest on node one, moved on eviction.
const drainDebianPod = `apiVersion: v1
kind: Pod
metadata:
  name: vm-drain
  namespace: ` + clusterNamespace + `
  annotations:
    crimux.io/ssh-authorized-keys: %q
    crimux.io/eviction: live-migrate
spec:
  nodeName: ` + kubeletNode + `
  runtimeClassName: vm
  containers:
  - name: vm
    image: ` + debianImage + `
    imagePullPolicy: IfNotPresent
    resources:
      limits: {cpu: "1", memory: 1Gi}
`

// drainTicks records the guest's uptime five times a second in its
// memory, as long as the SSH session that started it lives: the gaps
// between ticks are the guest's pauses as it saw them.
const drainTicks = `while :; do cut -d' ' -f1 /proc/uptime >>/dev/shm/crimux-ticks; echo x >/dev/shm/crimux-count; sleep 0.2; done`

// TestVMMigrateDrain (make e2e-migrate): the bed's two nodes, each a
// kubelet on crimux, kube-scheduler and crimux-controller. kubectl drain
// of node one moves the Debian guest (crimux.io/eviction: live-migrate)
// to node two, live: the same boot ID, its uptime going on, the SSH
// session's processes there, no pause in its ticks longer than the
// measured downtime allows, the file on its disk, the target pod's IP,
// kubectl exec and SSH there, its console in the target pod's log; the
// drain completes once the source pod is gone, and node one keeps
// nothing of it. Then the controller killed at each step of three
// migrations, and a VM on a node-local volume under drain. (Node two to
// node one, through the bed's TLS front to node one's libvirtd, stalls
// after a few hundred MiB: the moves here go from node one to node two.)
func TestVMMigrateDrain(t *testing.T) {
	if os.Getenv("CRIMUX_MIGRATE") == "" {
		t.Skip("node two is not up: make e2e-migrate runs the migration tests")
	}
	k8s := k8sDir(t)
	requireVM(t)
	requireNode2(t)
	startKubeProcs(t, k8s, controllerManager("disruption-controller,node-lifecycle-controller"),
		[]string{"kube-scheduler", "--kubeconfig", clusterPKI + "/admin.kubeconfig", "--secure-port", "0", "--leader-elect=false"})
	c1 := startClusterNode(t, k8s, migrationSection(1, ""), debianImage, vmAgentImage)
	c2 := startClusterNodeTwo(t, k8s, migrationSection(2, ""), debianImage, vmAgentImage)
	requireNodesReady(t, k8s)
	ctl := startCrimuxController(t, k8s)
	t.Run("drain there and back", func(t *testing.T) { cleanDrainPart(t, k8s); drainThereAndBack(t, k8s, c1, c2) })
	t.Run("the controller killed at each step", func(t *testing.T) { cleanDrainPart(t, k8s); controllerKilled(t, k8s, ctl, c1, c2) })
	t.Run("a VM on a node-local volume", func(t *testing.T) { cleanDrainPart(t, k8s); drainLocalVolume(t, k8s) })
}

// cleanDrainPart leaves, whatever a part did, both nodes schedulable and
// no pod in the namespace for the next part.
func cleanDrainPart(t *testing.T, k8s string) {
	t.Cleanup(func() {
		for _, n := range []string{kubeletNode, node2Name} {
			_, _ = kubectlErr(k8s, "uncordon", n)
		}
		if out, err := kubectlLong(k8s, 5*time.Minute, "-n", clusterNamespace, "delete", "pods", "--all", "--wait=true", "--timeout=4m"); err != nil {
			t.Logf("kubectl delete pods --all: %v\n%s", err, out)
		}
	})
}

// drain drains node (every pod: --force, as the bed's pods have no
// controller) and fails the test if it does not complete.
func drain(t *testing.T, k8s, node string) {
	t.Helper()
	start := time.Now()
	out, err := kubectlLong(k8s, 12*time.Minute, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=10m")
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
	}
	t.Logf("kubectl drain %s completed in %s:\n%s", node, time.Since(start).Round(100*time.Millisecond), tail(out, 12))
}

func drainThereAndBack(t *testing.T, k8s string, c1 *daemonRun, c2 *crimux) {
	key, pub := sshKey(t)
	kubectlApply(t, k8s, fmt.Sprintf(drainDebianPod, pub))
	src, srcID := waitVMPodRunning(t, k8s, "vm-drain")
	waitGuestExec(t, k8s, "vm-drain")
	kubectl(t, k8s, "-n", clusterNamespace, "exec", "vm-drain", "--", "cloud-init", "status", "--wait")
	kubectl(t, k8s, "-n", clusterNamespace, "exec", "vm-drain", "--", "sh", "-c", "echo crimux-migrated-disk >/var/tmp/migrate-file && sync")
	waitProtected(t, k8s, "vm-drain")
	bootID := guestText(t, k8s, "vm-drain", "cat /proc/sys/kernel/random/boot_id")
	session := startSSHSession(t, k8s, key, "vm-drain", drainTicks)
	upBefore := guestUptime(t, k8s, "vm-drain")
	net := snapshotPodNet(t, c1.crimux, c1.crictl("pods", "--namespace", clusterNamespace, "--name", "vm-drain", "-q"))

	drain(t, k8s, kubeletNode)
	m := waitMigration(t, k8s, "vm-drain", time.Minute, "vm-drain's drain migration Succeeded", func(m vmMigration) bool {
		return m.Status.Phase == "Succeeded" && m.Metadata.Labels["crimux.io/drain-node"] == kubeletNode
	})
	t.Logf("VMMigration %s: %s (%s → %s, pod %s)", m.Metadata.Name, m.Status.Message, m.Status.SourceNode, m.Status.TargetNode, m.Status.TargetPod)
	target := m.Status.TargetPod
	if m.Status.TargetNode != node2Name {
		t.Fatalf("the scheduler put the target on %q, want %s (node one is cordoned)", m.Status.TargetNode, node2Name)
	}
	dst, _ := waitVMPodRunning(t, k8s, target)
	waitGuestExec(t, k8s, target)
	if !strings.HasPrefix(dst.Status.PodIP, "10.88.78.") {
		t.Fatalf("the target pod's IP %q is not on node two's pod network", dst.Status.PodIP)
	}
	requireSameMachine(t, k8s, target, bootID, upBefore, m.Status.DowntimeMS)
	if ps := kubectl(t, k8s, "-n", clusterNamespace, "exec", target, "--", "pgrep", "-u", debianUser, "-f", "crimux-ticks"); ps == "" {
		t.Fatal("the SSH session's ticking is gone from the guest")
	}
	if f := kubectl(t, k8s, "-n", clusterNamespace, "exec", target, "--", "cat", "/var/tmp/migrate-file"); f != "crimux-migrated-disk" {
		t.Fatalf("the file on the root disk reads %q on node two", f)
	}
	requireGuestAddress(t, k8s, target, dst.Status.PodIP)
	requireSSHLogin(t, k8s, key, target)
	arrived := "this VM arrived from " + clusterNamespace + "/vm-drain by live migration"
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", target); !strings.Contains(logs, arrived) {
		t.Fatalf("kubectl logs %s lacks %q:\n%s", target, arrived, tail(logs, 20))
	}
	session.stop()
	if _, err := getPod(k8s, "vm-drain"); err == nil {
		t.Fatal("the source pod is still there after the drain")
	}
	requireVMPodLeftNothing(t, c1, src, srcID, net)

	kubectl(t, k8s, "uncordon", kubeletNode)
	kubectl(t, k8s, "-n", clusterNamespace, "delete", "pod", target, "--wait=true", "--timeout=3m")
	requireNode2Empty(t, c2)
}

// requireSameMachine: pod's guest is the one that booted with bootID,
// its uptime past upBefore (memory moved, no reboot), and its ticks
// paused at most as long as the switch-over's downtime allows (the
// guest's clock stands still while it is paused, so a longer pause is
// the guest frozen before or after it).
func requireSameMachine(t *testing.T, k8s, pod, bootID string, upBefore float64, downtimeMS int64) {
	t.Helper()
	if id := guestText(t, k8s, pod, "cat /proc/sys/kernel/random/boot_id"); id != bootID {
		t.Fatalf("boot ID %s in pod %s, %s before: the guest rebooted", id, pod, bootID)
	}
	if up := guestUptime(t, k8s, pod); up <= upBefore {
		t.Fatalf("uptime %.2fs in pod %s, %.2fs before: the guest rebooted", up, pod, upBefore)
	}
	ticks := guestText(t, k8s, pod, "cat /dev/shm/crimux-ticks")
	gap, n := maxGap(ticks)
	limit := 0.2 + float64(downtimeMS)/1000 + 3.0 // a tick, the downtime, TCG's scheduling on a busy host
	t.Logf("pod %s: %d ticks, the longest gap %.2fs (downtime %d ms)", pod, n, gap, downtimeMS)
	if gap > limit {
		t.Fatalf("the guest's ticks paused %.2fs, more than %.2fs (a tick, the downtime of %d ms, 3s)", gap, limit, downtimeMS)
	}
}

// maxGap is the longest step between consecutive numbers of lines.
func maxGap(lines string) (float64, int) {
	var prev, gap float64
	n := 0
	for _, l := range strings.Fields(lines) {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			continue
		}
		if n > 0 && v-prev > gap {
			gap = v - prev
		}
		prev = v
		n++
	}
	return gap, n
}

func guestText(t *testing.T, k8s, pod, cmd string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, k8s, "-n", clusterNamespace, "exec", pod, "--", "sh", "-c", cmd))
}

func guestUptime(t *testing.T, k8s, pod string) float64 {
	t.Helper()
	up, err := strconv.ParseFloat(strings.Fields(guestText(t, k8s, pod, "cat /proc/uptime"))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return up
}

// requireNode2Empty: node two's crimux runs no pod of the namespace and
// its libvirtd no domain of it.
func requireNode2Empty(t *testing.T, c2 *crimux) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "node two empty", func() error {
		if pods := strings.TrimSpace(c2.crictl("pods", "--namespace", clusterNamespace, "-q")); pods != "" {
			return fmt.Errorf("node two's pods of the namespace: %s", pods)
		}
		if doms := node2Virsh(t, "list", "--all", "--name"); strings.Contains(doms, "crimux-") {
			return fmt.Errorf("node two's domains: %s", doms)
		}
		return nil
	})
}
