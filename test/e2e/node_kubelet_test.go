package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The cgroup-v2 node as a cluster node (make e2e-node; test/node/kubelet.sh
// joined it): kubelet under systemd with the systemd cgroup driver, crimux
// as its runtime, registered with the test bed's API server as nodeVMName.
const (
	nodeVMName = "crimux-node" // test/cluster/lib.sh's NODE_VM_NAME
	// nodeVMPodMemMiB is the VM pod's memory limit; the pod's slice holds
	// it plus the RuntimeClass overhead (256 MiB).
	nodeVMPodMemMiB = 512
)

// nodeClusterVMPod is the test VM with a guest agent as a cluster user
// writes a durable VM pod, bound to the node: its root disk on a claim
// (nodeDurableVolume), so that it comes back with its data after the
// power cut.
const nodeClusterVMPod = `apiVersion: v1
kind: Pod
metadata:
  name: vm
  namespace: ` + clusterNamespace + `
  annotations: {crimux.io/root-disk: /var/lib/vm}
spec:
  nodeName: ` + nodeVMName + `
  runtimeClassName: vm
  containers:
  - name: vm
    image: ` + vmAgentImage + `
    imagePullPolicy: IfNotPresent
    stdin: true
    resources:
      limits: {cpu: "1", memory: 512Mi}
    volumeMounts: [{name: root, mountPath: /var/lib/vm}]
  volumes:
  - name: root
    persistentVolumeClaim: {claimName: vm-root}
`

// nodeClusterCtrPod is a container pod beside it.
const nodeClusterCtrPod = `apiVersion: v1
kind: Pod
metadata: {name: ctr, namespace: ` + clusterNamespace + `}
spec:
  nodeName: ` + nodeVMName + `
  containers:
  - name: echo
    image: ` + kubeletCtrImage + `
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo ` + ctrMarker + `; exec sleep 100000"]
`

// TestNodeKubelet: the cluster's VM scenarios on the cgroup-v2
// node, whose kubelet runs as a systemd unit with the systemd driver:
// RuntimeClass vm, the overhead in the pod's slice, kubectl logs, exec,
// port-forward and attach, the power-state annotation, in-place resize,
// a power cut (node_powercut_test.go), and kubectl delete leaving nothing
// (the records of the sandboxes the power cut killed included). The steps
// share the pods and run in
// order; make e2e-node counts them with TestNode's.
func TestNodeKubelet(t *testing.T) {
	requireNode(t)
	k8s := k8sDir(t)
	n := &nodeCluster{k8s: k8s}
	// The bed's volume controllers bind the VM's claim (and let it go).
	startKubeProcs(t, k8s, controllerManager(volumeControllers))
	runSteps(t, []step{
		{"kubelet is a systemd unit with the systemd driver, node Ready", n.kubeletUnit},
		{"a durable VM pod and a container pod Running through RuntimeClass vm", n.podsRunning},
		{"kubectl logs shows the VM's console", n.logs},
		{"kubectl exec runs in the guest", n.exec},
		{"kubectl port-forward reaches the guest", n.portForward},
		{"kubectl attach reaches the console", n.attach},
		{"the power-state annotation: Hibernate, Running, Paused, Running", n.power},
		{"in-place resize: 2 CPUs and +256 MiB, then back", n.resize},
		{"a power cut: the node reset, every pod made again, the durable VM's data kept", n.powerCut},
		{"kubectl delete leaves nothing on the node", n.deleteLeavesNothing},
	})
}

// nodeCluster is what the steps share.
type nodeCluster struct {
	k8s string
	vm  clusterPod
	ref vmPodRef
}

func (n *nodeCluster) kubeletUnit(t *testing.T) {
	if out := nodeRun(t, "systemctl show -p ActiveState,DropInPaths kubelet"); !strings.Contains(out, "ActiveState=active") ||
		!strings.Contains(out, "kubelet.service.d/20-crimux.conf") {
		t.Fatalf("kubelet's unit: %s; want it active with crimux's drop-in", out)
	}
	if cmd := nodeRun(t, "tr '\\0' ' ' </proc/$(systemctl show -p MainPID --value kubelet)/cmdline"); !strings.Contains(cmd, "--container-runtime-endpoint=unix:///run/crimux/crimux.sock") {
		t.Fatalf("kubelet's command line: %s; want crimux's endpoint (the drop-in)", cmd)
	}
	nodeRun(t, "test -d /sys/fs/cgroup/kubepods.slice") // the systemd driver's slices
	ready := kubectl(t, n.k8s, "get", "node", nodeVMName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.containerRuntimeVersion}`)
	if !strings.HasPrefix(ready, "True crimux://") {
		t.Fatalf("node %s: Ready and runtime %q; want True and crimux", nodeVMName, ready)
	}
	clusterNamespaceFor(t, n.k8s)
}

func (n *nodeCluster) podsRunning(t *testing.T) {
	nodeRun(t, "install -d -m 0700 "+nodeDurableDir)
	kubectlApply(t, n.k8s, nodeDurableVolume)
	kubectlApply(t, n.k8s, nodeClusterVMPod)
	kubectlApply(t, n.k8s, nodeClusterCtrPod)
	var vmID, ctrID string
	testutil.Eventually(t, slowed(5*time.Minute), "both pods Running on the node", func() error {
		var err error
		if n.vm, err = getPod(n.k8s, "vm"); err != nil {
			return err
		}
		if vmID, _, err = n.vm.runningID(); err != nil {
			return fmt.Errorf("vm: %w", err)
		}
		ctr, err := getPod(n.k8s, "ctr")
		if err == nil {
			ctrID, _, err = ctr.runningID()
		}
		return err
	})
	if !strings.HasPrefix(vmID, "vm--") || strings.HasPrefix(ctrID, "vm--") {
		t.Fatalf("container IDs %s (VM pod) and %s (container pod): runtimeClassName vm did not select the VM runtime", vmID, ctrID)
	}
	n.ref = vmPodRef{k8s: n.k8s, name: "vm", uid: n.vm.Metadata.UID, ctrID: vmID}
	slice := guaranteedSlicePath(n.vm.Metadata.UID)
	if got, want := nodeFile(t, slice+"/memory.max"), fmt.Sprint((nodeVMPodMemMiB+256)<<20); got != want {
		t.Fatalf("%s/memory.max = %s, want %s (the limit and the RuntimeClass's 256Mi overhead)", slice, got, want)
	}
	// qemu runs in a scope of its own in the pod's slice: kubelet's
	// systemd driver names the slice by its path, and a plain directory
	// there loses its controllers when systemd next rewrites the slice.
	domain := domainOf(vmID)
	pid := nodeRun(t, "cat /var/run/libvirt/qemu/"+domain+".pid")
	if cg, want := nodeRun(t, "cat /proc/"+pid+"/cgroup"), "0::"+strings.TrimPrefix(slice, "/sys/fs/cgroup")+"/"+domain+".scope"; cg != want {
		t.Fatalf("qemu's cgroup %s, want %s (a scope in the pod's slice)", cg, want)
	}
}

func (n *nodeCluster) logs(t *testing.T) {
	testutil.Eventually(t, slowed(4*time.Minute), "the console's marker in kubectl logs", func() error {
		if logs, err := kubectlErr(n.k8s, "-n", clusterNamespace, "logs", "vm"); err != nil || !strings.Contains(logs, vmMarker) {
			return fmt.Errorf("%v: %s", err, tail(logs, 5))
		}
		return nil
	})
	if logs := kubectl(t, n.k8s, "-n", clusterNamespace, "logs", "vm"); !strings.Contains(logs, "crimux: importing the image's disk") {
		t.Fatalf("kubectl logs vm does not tell the import of its root disk:\n%s", tail(logs, 20))
	}
	if logs := kubectl(t, n.k8s, "-n", clusterNamespace, "logs", "ctr"); !strings.Contains(logs, ctrMarker) {
		t.Fatalf("kubectl logs ctr = %q, want %s", logs, ctrMarker)
	}
}

func (n *nodeCluster) exec(t *testing.T) {
	if out := guestRead(t, n.ref, "cat /etc/os-release"); !strings.Contains(out, "crimux-test-vm") {
		t.Fatalf("kubectl exec cat /etc/os-release: %q", out)
	}
	if out, err := kubectlErr(n.k8s, "-n", clusterNamespace, "exec", "vm", "--", "sh", "-c", "echo out; exit 3"); exitCode(err) != 3 || !strings.HasPrefix(out, "out") {
		t.Fatalf("kubectl exec sh -c 'exit 3': %v, %q; want exit code 3 and its output", err, out)
	}
}

// portForward: the guest's httpd (:8080, up once it has its DHCP lease)
// through kube-apiserver, the node's kubelet and crimux.
func (n *nodeCluster) portForward(t *testing.T) {
	testutil.Eventually(t, slowed(2*time.Minute), "the guest's httpd through kubectl port-forward", func() error {
		local, stop, err := kubectlPortForward(n.k8s, "vm", 8080)
		if err != nil {
			return err
		}
		defer stop()
		client := http.Client{Timeout: 20 * time.Second}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", local))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		if !strings.HasPrefix(line, "CRIMUX-VM-HTTP") {
			return fmt.Errorf("GET / through port-forward: %q", line)
		}
		return nil
	})
}

func (n *nodeCluster) attach(t *testing.T) {
	// The console's shell runs what attach sends: 42 is in its output only.
	streamUntil(t, time.Minute, "echo attach-$((6*7))\n", "attach-42", filepath.Join(n.k8s, "kubectl"),
		"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "-n", clusterNamespace, "attach", "-i", "vm")
}

// power: Hibernate and Paused from the annotation, each back to Running
// with the guest's memory kept (no reboot: a guest boot costs minutes
// under TCG in the TCG node; the host's cluster test runs Shutdown).
func (n *nodeCluster) power(t *testing.T) {
	domain := domainOf(n.ref.ctrID)
	guestWrite(t, n.ref, "echo before-hibernate > /tmp/power-marker")
	n.ref.setPowerByAnnotation(t, "Hibernate")
	if st := nodeRun(t, "virsh domstate "+domain); st != "shut off" {
		t.Fatalf("Hibernate: domstate %q, want shut off", st)
	}
	if info := nodeRun(t, "virsh dominfo "+domain); !strings.Contains(info, "Managed save:   yes") {
		t.Fatalf("Hibernate: no managed save:\n%s", info)
	}
	requireExecRefused(t, n.ref, "Hibernate")
	n.ref.setPowerByAnnotation(t, "Running")
	// /tmp is the guest's tmpfs: the same memory, not a new boot.
	if got := guestRead(t, n.ref, "cat /tmp/power-marker"); got != "before-hibernate" {
		t.Fatalf("after Hibernate and Running: /tmp/power-marker = %q, want what was written before (the guest's memory)", got)
	}
	n.ref.setPowerByAnnotation(t, "Paused")
	if st := nodeRun(t, "virsh domstate "+domain); st != "paused" {
		t.Fatalf("Paused: domstate %q, want paused", st)
	}
	n.ref.setPowerByAnnotation(t, "Running")
	guestRead(t, n.ref, "true")
}

// resize: kubectl patch --subresource resize, 1 to 2 CPUs and +256 MiB:
// the guest (its agent onlines what crimux plugs) and the pod's slice
// follow; then back.
func (n *nodeCluster) resize(t *testing.T) {
	before := guestMemTotal(t, n.ref)
	resize(t, n.ref, "2", fmt.Sprintf("%dMi", nodeVMPodMemMiB+256))
	requireGuestCPUs(t, n.ref, "2")
	if grown := guestMemTotal(t, n.ref); grown < before+200 {
		t.Fatalf("free -m in the guest: %d MiB total after +256 MiB, %d before", grown, before)
	}
	n.requireSlice(t, "200000 100000", (nodeVMPodMemMiB+256+256)<<20)
	resize(t, n.ref, "1", fmt.Sprintf("%dMi", nodeVMPodMemMiB))
	requireGuestCPUs(t, n.ref, "1")
	n.requireSlice(t, "100000 100000", (nodeVMPodMemMiB+256)<<20)
	p, err := getPod(n.k8s, "vm")
	if err != nil {
		t.Fatal(err)
	}
	n.ref.requireSameContainer(t, p, "after the resizes")
}

// requireSlice: the pod's slice has the resized pod's cpu.max and
// memory.max (the overhead included).
func (n *nodeCluster) requireSlice(t *testing.T, cpuMax string, memMax int) {
	t.Helper()
	slice := guaranteedSlicePath(n.ref.uid)
	nodeWait(t, 30*time.Second, "the pod slice's limits",
		fmt.Sprintf("test \"$(cat %[1]s/cpu.max)\" = %[2]q && test \"$(cat %[1]s/memory.max)\" = %[3]d", slice, cpuMax, memMax))
}

// deleteLeavesNothing: kubectl delete of both pods leaves no sandbox,
// domain, state, pod slice, network namespace or pod IP on the node.
func (n *nodeCluster) deleteLeavesNothing(t *testing.T) {
	kubectl(t, n.k8s, "-n", clusterNamespace, "delete", "pod", "vm", "ctr", "--timeout", "5m")
	n.deleteVolume(t)
	nodeWait(t, 2*time.Minute, "nothing left on the node after kubectl delete", `
test -z "$(crictl pods -q)"
test -z "$(virsh list --all --name)"
test -z "$(find /var/lib/crimux/vms /var/lib/crimux/pods -mindepth 1 -maxdepth 1 2>/dev/null)"
test -z "$(ip netns list)"
test ! -e `+guaranteedSlicePath(n.ref.uid)+`
test -z "$(ls /var/lib/cni/networks/crimux-node 2>/dev/null | grep -v -e '^last_reserved_ip' -e '^lock$')"`)
}

// guaranteedSlicePath is where kubelet's systemd driver puts a Guaranteed
// pod: kubepods-pod<uid>.slice, the UID's dashes as underscores.
func guaranteedSlicePath(uid string) string {
	return "/sys/fs/cgroup/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
}
