package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The power cut: the cgroup-v2 node's qemu gets system_reset on its
// monitor while a durable VM pod (its root disk on a claim) and a
// container pod run. Nothing is shut down: the guest kernel's page cache,
// /run, every qemu and every namespace are gone at once.

// nodeDurableDir is the node's directory behind the durable VM's volume.
const nodeDurableDir = "/var/lib/crimux-durable"

// nodeDurableVolume is the VM pod's root volume as a cluster user
// writes it: a local PersistentVolume (a directory of the node) and its
// claim, bound to it by name by the bed's volume controllers.
const nodeDurableVolume = `apiVersion: v1
kind: PersistentVolume
metadata: {name: crimux-node-vm-root}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: ` + clusterNamespace + `, name: vm-root}
  local: {path: ` + nodeDurableDir + `}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [` + nodeVMName + `]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: vm-root, namespace: ` + clusterNamespace + `}
spec:
  storageClassName: ""
  volumeName: crimux-node-vm-root
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`

// nodePodNames are the pods running on the node when its power is cut.
var nodePodNames = []string{"vm", "ctr"}

// powerCut: the node reset with the durable VM pod and the container pod
// running. After it boots, systemd starts crimux, kubelet makes each pod
// again (a new sandbox and container), the dead VM exited NodeRebooted,
// the dead sandboxes are NOTREADY with nothing of theirs left running (no
// domain, namespace or address but the new pods'), and the VM boots its
// disk as it is, with the file its guest wrote before. kubectl delete
// (the next step) then shows their records collected too.
func (n *nodeCluster) powerCut(t *testing.T) {
	token := "power-cut-" + randomToken()
	guestWrite(t, n.ref, "echo "+token+" > /mnt/durable && sync")
	before := n.podContainers(t)
	oldSandboxes := nodeRun(t, "crictl pods -q")
	bootID := nodeFile(t, "/proc/sys/kernel/random/boot_id")

	start := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			n.afterPowerCutDiagnosis(t)
		}
	})
	qmpReset(t)
	nodeWait(t, 5*time.Minute, "the node booted again", fmt.Sprintf(`test "$(cat /proc/sys/kernel/random/boot_id)" != %q`, bootID))
	t.Logf("TIME node reset to SSH: %.1fs", time.Since(start).Seconds())
	nodeWait(t, 2*time.Minute, "crimux and kubelet started by systemd", "systemctl is-active -q crimux kubelet")
	after := n.waitPodsRemade(t, before)
	t.Logf("TIME node reset to every pod running again: %.1fs", time.Since(start).Seconds())
	n.ref.ctrID = after["vm"]
	n.requireDeadExited(t, before["vm"])
	n.requireOnlyNewPodsLive(t, strings.Fields(oldSandboxes), after)

	if logs := kubectl(t, n.k8s, "-n", clusterNamespace, "logs", "vm"); !strings.Contains(logs, "booting it as it is") {
		t.Fatalf("kubectl logs vm after the power cut, want its disk booted as it is:\n%s", tail(logs, 20))
	}
	if got := guestRead(t, n.ref, "cat /mnt/durable"); got != token {
		t.Fatalf("the VM reads %q from its disk after the power cut, want %q", got, token)
	}
	t.Logf("TIME node reset to the guest's agent answering: %.1fs", time.Since(start).Seconds())
}

// podContainers are the running container IDs of the node's pods, by
// pod name.
func (n *nodeCluster) podContainers(t *testing.T) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, name := range nodePodNames {
		p, err := getPod(n.k8s, name)
		if err != nil {
			t.Fatal(err)
		}
		id, _, err := p.runningID()
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		ids[name] = id
	}
	return ids
}

// waitPodsRemade waits until each pod runs a container other than the
// one it ran before the power cut, and returns the new ones.
func (n *nodeCluster) waitPodsRemade(t *testing.T, before map[string]string) map[string]string {
	t.Helper()
	after := map[string]string{}
	testutil.Eventually(t, slowed(6*time.Minute), "kubelet making every pod again", func() error {
		for _, name := range nodePodNames {
			p, err := getPod(n.k8s, name)
			if err != nil {
				return err
			}
			id, _, err := p.runningID()
			if err != nil {
				return fmt.Errorf("pod %s: %w", name, err)
			}
			if id == before[name] {
				return fmt.Errorf("pod %s still reports its container from before the power cut", name)
			}
			after[name] = id
		}
		return nil
	})
	return after
}

// requireDeadExited: the VM that ran when the power went exited 255
// NodeRebooted, not Completed as a guest's own power-off would read.
func (n *nodeCluster) requireDeadExited(t *testing.T, id string) {
	t.Helper()
	p, err := getPod(n.k8s, "vm")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("the VM pod has %d container statuses, want 1", len(p.Status.ContainerStatuses))
	}
	last := p.Status.ContainerStatuses[0].LastState.Terminated
	if last == nil || last.ContainerID != "crimux://"+id || last.ExitCode != 255 || last.Reason != "NodeRebooted" {
		t.Fatalf("kubelet's last state of the VM pod's container: %+v, want %s terminated 255 NodeRebooted", last, id)
	}
	// crimux's own record of it, unless kubelet has collected it since
	// (its container GC runs every minute; a slow node takes minutes to
	// make the pods again).
	st, err := nodeTry("crictl inspect -o go-template --template '{{.status.state}} {{.status.exitCode}} {{.status.reason}}' " + id)
	switch {
	case err != nil && strings.Contains(err.Error(), "NotFound"):
		t.Logf("the VM from before the power cut is collected already; kubelet saw it end: %+v", *last)
	case err != nil:
		t.Fatalf("crictl inspect %s: %v", id, err)
	case st != "CONTAINER_EXITED 255 NodeRebooted":
		t.Fatalf("the VM from before the power cut: %q, want CONTAINER_EXITED 255 NodeRebooted", st)
	}
}

// requireOnlyNewPodsLive: the sandboxes from before the power cut that
// kubelet has not removed yet are NOTREADY; the only domains running,
// namespaces and pod addresses on the node are the new pods'.
func (n *nodeCluster) requireOnlyNewPodsLive(t *testing.T, oldSandboxes []string, after map[string]string) {
	t.Helper()
	for _, id := range oldSandboxes {
		st, err := nodeTry("crictl inspectp -o go-template --template '{{.status.state}}' " + id)
		if err == nil && st != "SANDBOX_NOTREADY" {
			t.Fatalf("sandbox %s from before the power cut is %s, want NOTREADY (or removed)", id, st)
		}
	}
	var ips []string
	for _, name := range nodePodNames {
		p, err := getPod(n.k8s, name)
		if err != nil {
			t.Fatal(err)
		}
		ips = append(ips, p.Status.PodIP)
	}
	slices.Sort(ips)
	// kubelet stops the dead sandboxes (CNI DEL) before it makes the new
	// ones; crimux's first pass tears down those it has not.
	nodeWait(t, 2*time.Minute, "only the new pods' domains, namespaces and addresses", fmt.Sprintf(`
test "$(virsh list --name --state-running | grep .)" = %q
test "$({ ip netns list; ls /run/crimux/netns; } | wc -l)" = %d
test "$(ls /var/lib/cni/networks/crimux-node | grep -v -e '^last_reserved_ip' -e '^lock$' | sort | tr '\n' ' ')" = %q`,
		domainOf(after["vm"]), len(nodePodNames), strings.Join(ips, " ")+" "))
}

// deleteVolume removes the VM's claim and volume, and the volume's data
// (the test's own).
func (n *nodeCluster) deleteVolume(t *testing.T) {
	t.Helper()
	kubectl(t, n.k8s, "-n", clusterNamespace, "delete", "pvc", "vm-root", "--ignore-not-found", "--timeout", "2m")
	kubectl(t, n.k8s, "delete", "pv", "crimux-node-vm-root", "--ignore-not-found", "--timeout", "2m")
	nodeRun(t, "rm -rf "+nodeDurableDir)
}

// qmpReset presses the node's reset button: system_reset on its qemu's
// monitor (test/node/up.sh's NODE_QMP).
func qmpReset(t *testing.T) {
	t.Helper()
	run := os.Getenv("NODE_RUN")
	if run == "" {
		run = "/run/crimux-node"
	}
	conn, err := net.DialTimeout("unix", filepath.Join(run, "qmp.sock"), 10*time.Second)
	if err != nil {
		t.Fatalf("the node's QMP monitor: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // the greeting
		t.Fatalf("QMP greeting: %v", err)
	}
	for _, cmd := range []string{"qmp_capabilities", "system_reset"} {
		if err := json.NewEncoder(conn).Encode(map[string]string{"execute": cmd}); err != nil {
			t.Fatalf("QMP %s: %v", cmd, err)
		}
		if err := qmpReturn(r); err != nil {
			t.Fatalf("QMP %s: %v", cmd, err)
		}
	}
}

// qmpReturn reads QMP messages up to the command's answer (events may
// come first).
func qmpReturn(r *bufio.Reader) error {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		var msg struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			return fmt.Errorf("%w: %q", err, line)
		}
		if msg.Error != nil {
			return fmt.Errorf("%s", msg.Error.Desc)
		}
		if msg.Return != nil {
			return nil
		}
	}
}

// afterPowerCutDiagnosis logs what a failed power cut leaves to read: the
// pods' status as kubelet reports it, the runtime's view, and the node's
// crimux and kubelet logs since the boot.
func (n *nodeCluster) afterPowerCutDiagnosis(t *testing.T) {
	for _, name := range nodePodNames {
		out, _ := kubectlErr(n.k8s, "-n", clusterNamespace, "get", "pod", name, "-o", "jsonpath={.status}")
		t.Logf("pod %s status: %s", name, out)
	}
	for _, script := range []string{"crictl pods", "crictl ps -a", "virsh list --all",
		"for c in $(crictl ps -a -q --name vm); do echo \"== $c\"; crictl logs --tail 15 $c 2>&1; done",
		"for d in $(virsh list --name); do virsh domblkstat $d vda; done",
		"journalctl -b -u crimux --no-pager | tail -n 80", "journalctl -b -u kubelet --no-pager | grep -v ' I[0-9]' | tail -n 60"} {
		out, err := nodeTry(script)
		t.Logf("in the node: %s (%v)\n%s", script, err, out)
	}
}
