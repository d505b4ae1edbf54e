package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// debianVMPod is the Debian guest as a VM pod named name on kubelet
// node one, the way a cluster user writes it: runtimeClassName vm (the
// RuntimeClass of systemd/runtimeclass-vm.yaml, with its 256Mi
// overhead), a CPU and memory limit (the VM's size) and an SSH key for
// cloud-init (the %q left for it); extra is more of the container's
// fields, indented as they are.
func debianVMPod(name, extra string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + clusterNamespace + `
  annotations:
    crimux.io/ssh-authorized-keys: %q
spec:
  nodeName: ` + kubeletNode + `
  runtimeClassName: vm
  containers:
  - name: vm
    image: ` + debianImage + `
    imagePullPolicy: IfNotPresent
    resources:
      limits: {cpu: "1", memory: 1Gi}
` + extra
}

// clusterVMPod is the Debian guest with stdin, so that kubectl attach -i
// reaches the serial console, and an exec liveness probe (run by the
// guest agent; while the user keeps the VM off it errors, and kubelet
// discards an errored probe: no restart).
var clusterVMPod = debianVMPod("vm", `    stdin: true
    livenessProbe:
      exec: {command: ["true"]}
      periodSeconds: 5
      timeoutSeconds: 30
      failureThreshold: 3
`)

// clusterCtrPod is an ordinary container pod beside it.
const clusterCtrPod = `apiVersion: v1
kind: Pod
metadata:
  name: ctr
  namespace: ` + clusterNamespace + `
spec:
  nodeName: ` + kubeletNode + `
  containers:
  - name: echo
    image: ` + kubeletCtrImage + `
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo ` + ctrMarker + `; exec sleep 100000"]
`

// TestClusterVMPods (make e2e-cluster): with kubectl against the
// test bed's API server, a VM pod (runtimeClassName: vm, the Debian guest)
// and a container pod reach Running on a kubelet whose runtime is crimux;
// the RuntimeClass overhead reaches the pod's memory cgroup; kubectl get
// -o wide shows the VM's pod IP; kubectl logs shows its console, kubectl
// exec runs in the guest (through its agent), kubectl port-forward reaches
// its sshd and kubectl attach its console; the node agent applies power
// states, snapshots, restores and reboots from annotations and rides out
// an API server outage; kubectl delete leaves no domain, disk, network
// namespace, cgroup or IP.
func TestClusterVMPods(t *testing.T) {
	k8s := k8sDir(t)
	requireVM(t)
	c := startClusterNode(t, k8s, "guest_boot_timeout = \"30s\"\n", debianImage, stuckImage)
	_, pub := sshKey(t)
	kubectlApply(t, k8s, fmt.Sprintf(clusterVMPod, pub))
	kubectlApply(t, k8s, clusterCtrPod)
	kubectlApply(t, k8s, clusterStuckPod)

	var vmID, ctrID string
	var vm clusterPod
	testutil.Eventually(t, 10*time.Minute, "both pods Running", func() error {
		var err error
		if vm, err = getPod(k8s, "vm"); err != nil {
			return err
		}
		if vmID, _, err = vm.runningID(); err != nil {
			return fmt.Errorf("vm: %w", err)
		}
		ctr, err := getPod(k8s, "ctr")
		if err == nil {
			if ctrID, _, err = ctr.runningID(); err != nil {
				err = fmt.Errorf("ctr: %w", err)
			}
		}
		return err
	})
	t.Logf("kubelet runs VM %s and container %s", vmID, ctrID)
	if !strings.HasPrefix(vmID, "vm--") || strings.HasPrefix(ctrID, "vm--") {
		t.Fatalf("container IDs %s (VM pod) and %s (container pod): runtimeClassName vm did not select the VM runtime", vmID, ctrID)
	}
	checkPodOverhead(t, vm)
	wide := kubectl(t, k8s, "-n", clusterNamespace, "get", "pod", "vm", "-o", "wide")
	if vm.Status.PodIP == "" || !strings.HasPrefix(vm.Status.PodIP, bed.podNet) || !strings.Contains(wide, vm.Status.PodIP) {
		t.Fatalf("kubectl get pod vm -o wide does not show the VM's pod IP %q:\n%s", vm.Status.PodIP, wide)
	}

	// exec through the guest agent (up once systemd started it).
	testutil.Eventually(t, guestBootTimeout, "kubectl exec reaching the guest agent", func() error {
		out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", "vm", "--", "cat", "/etc/os-release")
		if err == nil && !strings.Contains(out, "Debian") {
			err = fmt.Errorf("os-release %q", out)
		}
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if out, err := kubectlErr(k8s, "-n", clusterNamespace, "exec", "vm", "--", "sh", "-c", "echo out; exit 3"); exitCode(err) != 3 || !strings.HasPrefix(out, "out") {
		t.Fatalf("kubectl exec sh -c 'exit 3': %v, %q; want exit code 3 and its output", err, out)
	}
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", "vm"); !strings.Contains(logs, "Debian GNU/Linux 12") {
		t.Fatalf("kubectl logs vm lacks the console's boot banner:\n%s", tail(logs, 30))
	}
	if logs := kubectl(t, k8s, "-n", clusterNamespace, "logs", "ctr"); !strings.Contains(logs, ctrMarker) {
		t.Fatalf("kubectl logs ctr = %q, want %s", logs, ctrMarker)
	}
	requireSSHBanner(t, k8s, "vm")
	checkGuestNotBootedEvent(t, k8s)
	streamUntil(t, time.Minute, "\n", "login:", filepath.Join(k8s, "kubectl"),
		"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "-n", clusterNamespace, "attach", "-i", "vm")
	// kubectl crimux console is kubectl attach -i -t, run from PATH.
	t.Setenv("PATH", k8s+":"+os.Getenv("PATH"))
	streamUntil(t, time.Minute, "\n", "login:", filepath.Join(filepath.Dir(bed.crimuxBin), "kubectl-crimux"),
		"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "-n", clusterNamespace, "console", "vm")

	// The node agent: power state, snapshots and reboots from annotations.
	v := vmPodRef{k8s: k8s, name: "vm", uid: vm.Metadata.UID, ctrID: vmID}
	checkPowerStatesByAnnotation(t, v)
	checkSnapshotByAnnotation(t, v)
	grown := checkResize(t, c, v)
	checkRebootOnceAcrossRestart(t, c, v)
	requireSizeAfterReboot(t, v, grown)
	checkAPIServerOutage(t, c, v)

	metrics := scrapeAddr(t, c)
	requireVMSeries(t, metrics, "vm", true)
	requireDeleteLeavesNothing(t, c, k8s, vm, vmID)
	requireVMSeries(t, metrics, "vm", false)
}

// scrapeAddr is where the cluster node's crimux serves its metrics
// (startClusterNode's metrics_address).
func scrapeAddr(t *testing.T, c *daemonRun) string {
	t.Helper()
	b, err := os.ReadFile(c.configPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "metrics_address = "); ok {
			return strings.Trim(v, `"`)
		}
	}
	t.Fatalf("no metrics_address in %s", c.configPath)
	return ""
}

// requireVMSeries: crimux's metrics have the per-VM series of the
// cluster namespace's pod, labelled with its names, or (want false) none
// once it is deleted.
func requireVMSeries(t *testing.T, addr, pod string, want bool) {
	t.Helper()
	labels := fmt.Sprintf(`namespace=%q,pod=%q`, clusterNamespace, pod)
	testutil.Eventually(t, time.Minute, fmt.Sprintf("crimux_vm_ series of pod %s present: %v", pod, want), func() error {
		var found []string
		for _, line := range strings.Split(scrapeMetrics(t, addr), "\n") {
			if strings.HasPrefix(line, "crimux_vm_") && strings.Contains(line, labels) {
				found = append(found, line)
			}
		}
		if want && !slices.ContainsFunc(found, func(l string) bool { return strings.HasPrefix(l, "crimux_vm_cpu_seconds_total{") }) {
			return fmt.Errorf("no crimux_vm_cpu_seconds_total with %s among %d series", labels, len(found))
		}
		if !want && len(found) > 0 {
			return fmt.Errorf("series of the deleted pod: %v", found)
		}
		return nil
	})
}

// checkPodOverhead: the RuntimeClass overhead (256Mi) reached the pod's
// memory cgroup, which kubelet sizes as the container's limit plus it.
func checkPodOverhead(t *testing.T, vm clusterPod) {
	t.Helper()
	path := filepath.Join("/sys/fs/cgroup/memory", kubeletCgroup, "kubepods", "pod"+vm.Metadata.UID, "memory.limit_in_bytes")
	if vm.Status.QOSClass != "Guaranteed" {
		path = filepath.Join("/sys/fs/cgroup/memory", kubeletCgroup, "kubepods", strings.ToLower(vm.Status.QOSClass), "pod"+vm.Metadata.UID, "memory.limit_in_bytes")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the VM pod's memory cgroup: %v", err)
	}
	if got, want := strings.TrimSpace(string(b)), strconv.Itoa(1<<30+256<<20); got != want {
		t.Fatalf("%s = %s, want %s (1Gi limit + the RuntimeClass's 256Mi overhead)", path, got, want)
	}
}

// kubectlPortForward runs kubectl port-forward to the pod's port and
// returns the local port kubectl chose and what stops it.
func kubectlPortForward(k8s, pod string, port int) (local int, stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"), "--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"),
		"-n", clusterNamespace, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return 0, nil, err
	}
	stop = func() { cancel(); _ = cmd.Wait() }
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				stop()
				return 0, nil, errors.New("kubectl port-forward exited before forwarding")
			}
			if m := re.FindStringSubmatch(l); m != nil {
				go func() { // keep draining kubectl's "Handling connection" lines
					for range lines {
					}
				}()
				p, _ := strconv.Atoi(m[1])
				return p, stop, nil
			}
		case <-timeout:
			stop()
			return 0, nil, errors.New("kubectl port-forward: no local port within 30s")
		}
	}
}

// requireSSHBanner: the guest's sshd greets through kubectl port-forward.
// sshd may start after the guest agent (cloud-init makes its host keys
// first), and kubectl port-forward exits once a connection to the pod is
// refused, so each attempt runs a port-forward of its own.
func requireSSHBanner(t *testing.T, k8s, pod string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "sshd's banner through kubectl port-forward", func() error {
		local, stop, err := kubectlPortForward(k8s, pod, 22)
		if err != nil {
			return err
		}
		defer stop()
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", local), 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if !strings.HasPrefix(line, "SSH-2.0-") {
			return fmt.Errorf("read %q: %v", line, err)
		}
		return nil
	})
}

// requireDeleteLeavesNothing: kubectl delete of both pods removes them from
// the API server, and crimux holds no sandbox, domain, VM or pod directory,
// network namespace, pod cgroup or IP of them.
func requireDeleteLeavesNothing(t *testing.T, c *daemonRun, k8s string, vm clusterPod, vmID string) {
	t.Helper()
	vmSandbox := c.crictl("pods", "--namespace", clusterNamespace, "--name", "vm", "-q")
	net := snapshotPodNet(t, c.crimux, vmSandbox)
	kubectl(t, k8s, "-n", clusterNamespace, "delete", "pod", "vm", "ctr", "--timeout", "5m")
	requireVMPodLeftNothing(t, c, vm, vmID, net)
}

// requireVMPodLeftNothing: once the VM pod vm is deleted, crimux c holds
// no sandbox of the test's namespace, nor the pod's domain, VM or pod
// directory, network namespace, pod cgroup or IP (net, taken before).
func requireVMPodLeftNothing(t *testing.T, c *daemonRun, vm clusterPod, vmID string, net *podNetSnapshot) {
	t.Helper()
	domain := domainOf(vmID)
	waitSandboxesGone(t, c, clusterNamespace)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("domain %s still defined after kubectl delete", domain)
	}
	// A sandbox is no longer listed once its removal has begun, while
	// RemovePodSandbox still deletes its files: the last of kubelet's
	// calls may still be under way (it took 0.3 s once). A leak stays.
	testutil.Eventually(t, 30*time.Second, "nothing left in crimux's state dir after kubectl delete", func() error {
		for _, glob := range []string{"vms/*", "pods/*"} {
			if left, _ := filepath.Glob(filepath.Join(c.stateDir, glob)); len(left) > 0 {
				return fmt.Errorf("left in crimux's state dir after kubectl delete: %v", left)
			}
		}
		return nil
	})
	net.assertReleased(t, "after kubectl delete")
	for _, d := range cgroupDirs(filepath.Join(kubeletCgroup, "kubepods")) {
		for _, pattern := range []string{"pod" + vm.Metadata.UID, "*/pod" + vm.Metadata.UID} {
			if left, _ := filepath.Glob(filepath.Join(d, pattern)); len(left) > 0 {
				t.Fatalf("pod cgroup left after kubectl delete: %v", left)
			}
		}
	}
}

// removeClusterPods removes, through crimux, whatever pods of the cluster
// tests a failed run left behind.
func removeClusterPods(c *crimux) {
	out, _ := c.crictlErr("pods", "--namespace", clusterNamespace, "-q")
	for _, id := range strings.Fields(out) {
		_, _ = c.crictlErr("rmp", "-f", id)
	}
}

// exitCode is a command's exit status (-1 if it did not exit normally, 0
// without an error).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
