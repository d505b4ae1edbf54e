package e2e

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// A real kubelet (unmodified v1.37, built by test/kubelet/build.sh; make
// e2e-kubelet sets CRIMUX_KUBELET) runs standalone against crimux: no API
// server, static pods from a manifest directory, pod status from its own
// /pods endpoint.
//
// The VM pod is routed to the VM runtime by the annotation
// crimux.io/workload-type: vm, not by runtimeClassName: kubelet resolves a
// RuntimeClass through the API server, so a standalone kubelet has no
// RuntimeClass manager, and kubelet v1.37.2 even panics (nil
// *runtimeclass.Manager in NamespacesForPod) on a static pod that names
// one. With an API server, runtimeClassName: vm (systemd/runtimeclass-vm.yaml)
// selects the same runtime through the handler "vm".

const (
	kubeletNode      = "crimux-e2e-node"
	kubeletNamespace = "crimux-kubelet-e2e"
	ctrMarker        = "CRIMUX-CTR-STARTED"
	kubeletCtrImage  = "127.0.0.1:5117/crimux/busybox:latest"
)

// kubeletCgroup is the host kubelets' cgroupRoot, one per bed instance: a
// kubelet removes (and kills) the pod cgroups under its root that are not
// its pods'.
var kubeletCgroup = "/" + bedInstance("crimux-kubelet-e2e")

const ctrManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kl-ctr
  namespace: ` + kubeletNamespace + `
spec:
  containers:
  - name: echo
    image: ` + kubeletCtrImage + `
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo ` + ctrMarker + `; exec sleep 100000"]
`

// vmManifestOf is a static VM pod routed by annotation (no RuntimeClass,
// so no pod overhead) with a memory limit.
func vmManifestOf(name, memory string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + kubeletNamespace + `
  annotations:
    crimux.io/workload-type: vm
spec:
  containers:
  - name: vm
    image: ` + vmImage + `
    imagePullPolicy: IfNotPresent
    resources:
      limits:
        memory: ` + memory + `
        cpu: 500m
`
}

// vmManifest: no pod overhead here, the guest gets 512Mi less qemu's
// 256Mi. It has two volumes: an emptyDir, and a hostPath directory
// standing in for a ConfigMap (a standalone kubelet has no API server to
// read one from; both reach the guest the same way, as a directory kubelet
// hands crimux as a CRI mount).
var vmManifest = vmManifestOf("kl-vm", "512Mi") + `    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: config, mountPath: /etc/app, readOnly: true}
  volumes:
  - name: scratch
    emptyDir: {}
  - name: config
    hostPath: {path: ` + kubeletConfigDir + `, type: Directory}
`

// kubeletConfigDir is the hostPath directory of vmManifest.
const kubeletConfigDir = "/var/lib/crimux-kubelet-e2e-config"

// smallVMManifest is a VM pod whose 128Mi limit cannot hold a guest and
// qemu's overhead (started, its qemu would be OOM-killed in the pod and
// restarted again and again): crimux refuses it at CreateContainer, and
// kubelet shows why.
var smallVMManifest = vmManifestOf("kl-vm-small", "128Mi")

// kubeletConfigNoEviction ends every test kubelet's configuration:
// eviction and image GC out of the way (images cannot be pulled again from
// outside, and the bed's disk may be full of other things).
const kubeletConfigNoEviction = `evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
`

// kubeletConfig is the standalone KubeletConfiguration of TESTBED.md:
// crimux as the runtime, cgroupfs under a root of its own, no negative
// oom_score_adj, no node registration, eviction and image GC out of the
// way (images cannot be pulled again from outside), and a periodic pod
// sync every 10 s (not the 1 min default) so that waiting out three syncs
// is short.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]s
imageServiceEndpoint: %[1]s
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
oomScoreAdj: 0
staticPodPath: %[3]s
fileCheckFrequency: 2s
syncFrequency: 10s
registerNode: false
failSwapOn: false
failCgroupV1: false
port: %[4]d
readOnlyPort: 0
healthzPort: 0
podLogsDir: %[5]s
volumePluginDir: %[6]s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
` + kubeletConfigNoEviction

// kubeletRun is one standalone kubelet of a test.
type kubeletRun struct {
	t         *testing.T
	cmd       *exec.Cmd
	dir       string
	manifests string
	port      int
	addr      string // where it serves port, for pods()
	logPath   string
	client    *http.Client
}

// kubeletPod is what the test reads of a pod from kubelet's /pods.
type kubeletPod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase             string `json:"phase"`
		PodIP             string `json:"podIP"`
		ContainerStatuses []struct {
			Name         string `json:"name"`
			ContainerID  string `json:"containerID"`
			RestartCount int    `json:"restartCount"`
			State        struct {
				Running *struct {
					StartedAt string `json:"startedAt"`
				} `json:"running"`
				Waiting *struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"waiting"`
				Terminated *struct {
					Reason string `json:"reason"`
				} `json:"terminated"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// running reports the pod's one container ID (without kubelet's
// "<runtime>://" prefix) and restart count, or why it is not running.
func (p kubeletPod) running() (id string, restarts int, err error) {
	if p.Status.Phase != "Running" || len(p.Status.ContainerStatuses) != 1 {
		return "", 0, fmt.Errorf("%s: phase %q, %d container statuses", p.Metadata.Name, p.Status.Phase, len(p.Status.ContainerStatuses))
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.State.Running == nil {
		b, _ := json.Marshal(cs.State)
		return "", 0, fmt.Errorf("%s: container %s not running: %s", p.Metadata.Name, cs.Name, b)
	}
	_, id, _ = strings.Cut(cs.ContainerID, "://")
	return id, cs.RestartCount, nil
}

// TestKubeletMixedPods: a container static pod and a VM static pod reach
// Running through crimux under a real kubelet; a VM pod too small for its
// VM is refused up front and kubelet says why, with no restart; crictl logs shows both
// outputs (the VM's serial console); the VM paused, hibernated and resumed
// with crimuxctl is, two minutes later, still the same container with no
// restart; removing the manifests removes both pods, the domain and the
// overlay disk.
func TestKubeletMixedPods(t *testing.T) {
	bin := os.Getenv("CRIMUX_KUBELET")
	if bin == "" {
		t.Skip("CRIMUX_KUBELET is not set (make e2e-kubelet builds kubelet and sets it)")
	}
	requireVM(t)
	wrapper := installKubeletWrapper(t)
	prepareKubeletCgroups(t)
	prepareConfigDir(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c := startDaemon(t, fmt.Sprintf("[libvirt]\nemulator = %q\nplacement_socket = %q\n", wrapper, kubeletPlacementSocket),
		nil, "--vm-accel", "tcg", "--metrics-address", metricsAddr)
	t.Cleanup(func() { removeKubeletPods(c) })
	k := startKubelet(t, bin, c.endpoint)

	k.writeManifest("ctr.yaml", ctrManifest)
	k.writeManifest("vm.yaml", vmManifest)
	k.writeManifest("vm-small.yaml", smallVMManifest)
	ctrName, vmName, smallName := "kl-ctr-"+kubeletNode, "kl-vm-"+kubeletNode, "kl-vm-small-"+kubeletNode
	var ctrID, vmID string
	testutil.Eventually(t, 4*time.Minute, "both static pods Running in kubelet's /pods", func() error {
		pods, err := k.pods()
		if err != nil {
			return err
		}
		if ctrID, _, err = pods[ctrName].running(); err != nil {
			return err
		}
		vmID, _, err = pods[vmName].running()
		return err
	})
	t.Logf("kubelet runs container %s and VM %s", ctrID, vmID)
	if !strings.HasPrefix(vmID, "vm--") || strings.HasPrefix(ctrID, "vm--") {
		t.Fatalf("container IDs %s (container) and %s (VM): the VM pod did not go to the VM runtime", ctrID, vmID)
	}
	checkCrictlSees(t, c, ctrID, vmID)
	requireRefusedUpFront(t, k, smallName)
	waitLogs(t, c, ctrID, ctrMarker, 30*time.Second)
	waitLogs(t, c, vmID, vmMarker, 90*time.Second)
	// kubelet knows the VM pod's IP (its pod network, CNI), and the guest
	// answers on it.
	var vmIP string
	testutil.Eventually(t, 30*time.Second, "the VM pod's IP in kubelet's /pods", func() error {
		pods, err := k.pods()
		if err == nil {
			if vmIP = pods[vmName].Status.PodIP; !strings.HasPrefix(vmIP, bed.podNet) {
				err = fmt.Errorf("podIP %q", vmIP)
			}
		}
		return err
	})
	requireGuestHTTP(t, fmt.Sprintf("http://%s:%d/", vmIP, vmHTTPPort), 30*time.Second)
	t.Logf("kubelet reports VM pod IP %s; the guest answers on it", vmIP)

	checkVMVolumes(t, c, k, vmID)
	powerCycle(t, c, vmID, metricsAddr)
	// kubelet acts on a change it sees at its next relist (every second)
	// or periodic sync (syncFrequency 10s): three syncs show what it does.
	t.Log("waiting 35 s, three of kubelet's periodic syncs: kubelet must not restart, recreate or remove anything")
	time.Sleep(35 * time.Second)
	pods, err := k.pods()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{ctrName: ctrID, vmName: vmID} {
		id, restarts, err := pods[name].running()
		if err != nil || id != want || restarts != 0 {
			t.Fatalf("%s three syncs later: container %s, %d restarts (%v); want %s, 0 restarts", name, id, restarts, err, want)
		}
	}
	if out := c.crictl("pods", "--namespace", kubeletNamespace, "-q"); len(strings.Fields(out)) != 3 {
		t.Fatalf("crictl pods: %d sandboxes, want the 3 first ones (nothing recreated):\n%s", len(strings.Fields(out)), out)
	}
	requireRefusedUpFront(t, k, smallName)
	checkKubeletMetrics(t, metricsAddr)

	var vmStatus struct {
		Info struct {
			Domain string `json:"domain"`
		} `json:"info"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", vmID), &vmStatus)
	domain, vmDir := vmStatus.Info.Domain, filepath.Join(c.stateDir, "vms", strings.TrimPrefix(vmID, "vm--"))
	podDisks, _ := filepath.Glob(filepath.Join(c.stateDir, "pods", "*", "disk.qcow2"))
	if len(podDisks) != 1 {
		t.Fatalf("the VM pod's root disk: %v, want one", podDisks)
	}

	k.removeManifest("ctr.yaml")
	k.removeManifest("vm.yaml")
	k.removeManifest("vm-small.yaml")
	testutil.Eventually(t, 60*time.Second, "kubelet's /pods empty", func() error {
		pods, err := k.pods()
		if err == nil && len(pods) > 0 {
			err = fmt.Errorf("still %d pods", len(pods))
		}
		return err
	})
	waitSandboxesGone(t, c, kubeletNamespace)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("domain %s still defined after the pod's removal", domain)
	}
	if _, err := os.Stat(vmDir); !os.IsNotExist(err) {
		t.Fatalf("the VM's directory is still there: %s (%v)", vmDir, err)
	}
	if _, err := os.Stat(filepath.Dir(podDisks[0])); !os.IsNotExist(err) {
		t.Fatalf("the VM pod's directory (root disk) is still there: %s (%v)", podDisks[0], err)
	}
	if pids := virtiofsdOf(kubeletConfigDir); len(pids) > 0 {
		t.Fatalf("virtiofsd %v still serves %s after the pod's removal", pids, kubeletConfigDir)
	}
	if out := c.crictl("ps", "-a", "-q"); strings.Contains(out, ctrID) || strings.Contains(out, vmID) {
		t.Fatalf("container %s or %s still listed:\n%s", ctrID, vmID, out)
	}
}

// kubeletSetup is what differs between the standalone kubelet and a
// cluster's: its KubeletConfiguration (rendered once its directory and
// port are known), extra flags, and when it counts as up; and between the
// cluster's nodes: the node name ("": kubeletNode), the command prefix that
// runs kubelet in another node's namespaces (test/bed/node2-exec.sh; nil:
// this host's), and the address it serves on there ("": 127.0.0.1).
type kubeletSetup struct {
	config func(k *kubeletRun) string
	args   []string
	ready  func(k *kubeletRun) error
	node   string
	prefix []string
	addr   string
}

// startKubelet starts a standalone kubelet (TESTBED.md: kubeletConfig)
// against crimux at endpoint; it is up once it serves /pods.
func startKubelet(t *testing.T, bin, endpoint string) *kubeletRun {
	t.Helper()
	return startKubeletWith(t, bin, kubeletSetup{
		config: func(k *kubeletRun) string {
			return fmt.Sprintf(kubeletConfig, endpoint, kubeletCgroup, k.manifests, k.port,
				filepath.Join(k.dir, "logs"), filepath.Join(k.dir, "volume-plugins"))
		},
		ready: func(k *kubeletRun) error { _, err := k.pods(); return err },
	})
}

// startKubeletWith starts kubelet as setup says and waits until it is up.
func startKubeletWith(t *testing.T, bin string, setup kubeletSetup) *kubeletRun {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", "crimux-kubelet-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	node, addr := cmp.Or(setup.node, kubeletNode), cmp.Or(setup.addr, "127.0.0.1")
	// (A port free here is free in another node's network namespace too.)
	k := &kubeletRun{t: t, dir: dir, manifests: filepath.Join(dir, "manifests"), port: freePort(t), addr: addr, logPath: filepath.Join(dir, "kubelet.log"),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
	for _, d := range []string{"manifests", "root", "logs", "volume-plugins", "cwd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(setup.config(k)), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(k.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Niced: the machine is small and crimux, containerd and qemu matter more.
	// kubelet puts its device plugin socket in /var/lib/kubelet whatever
	// --root-dir says: remove that directory again if kubelet made it
	// (node two's is its own, test/bed/node2-up.sh's).
	if _, err := os.Stat("/var/lib/kubelet"); os.IsNotExist(err) && setup.prefix == nil {
		t.Cleanup(func() { os.RemoveAll("/var/lib/kubelet") })
	}
	k.cmd = commandIn(setup.prefix, "nice", append([]string{"-n", "10", bin, "--config", filepath.Join(dir, "kubelet.yaml"),
		"--root-dir", filepath.Join(dir, "root"), "--cert-dir", filepath.Join(dir, "pki"),
		"--hostname-override", node, "--v=2"}, setup.args...)...)
	// Run kubelet in an empty directory of its own: when kubelet removes a
	// container whose status has no log_path (one a CRI client made without
	// a log directory), its log manager's Clean removes every match of
	// log_path+"*", which is "*" in kubelet's working directory. Seen: every
	// file of test/e2e vanished while kubelet ran there; in CI, a kubelet
	// that collected such a container at start removed its own log and the
	// still empty manifests directory beside it.
	k.cmd.Dir = filepath.Join(dir, "cwd")
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	if err := k.cmd.Start(); err != nil {
		t.Fatalf("start kubelet: %v", err)
	}
	t.Cleanup(func() {
		k.stop()
		unmountUnderIn(setup.prefix, dir) // kubelet bind-mounts its root dir onto itself
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(k.logPath)
			t.Logf("kubelet log (errors and the last lines):\n%s", kubeletLogDigest(string(b)))
		}
	})
	testutil.Eventually(t, 90*time.Second, "kubelet up", func() error {
		err := setup.ready(k)
		if err != nil && k.cmd.ProcessState != nil {
			t.Fatalf("kubelet exited: %v", k.cmd.ProcessState)
		}
		return err
	})
	return k
}

func (k *kubeletRun) stop() {
	if k.cmd.Process == nil || k.cmd.ProcessState != nil {
		return
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = k.cmd.Process.Kill()
		<-done
	}
}

// pods returns kubelet's pods by name.
func (k *kubeletRun) pods() (map[string]kubeletPod, error) {
	resp, err := k.client.Get(fmt.Sprintf("https://%s/pods", net.JoinHostPort(k.addr, strconv.Itoa(k.port))))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /pods: %s: %.200s", resp.Status, body)
	}
	var list struct {
		Items []kubeletPod `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET /pods: %w", err)
	}
	pods := map[string]kubeletPod{}
	for _, p := range list.Items {
		pods[p.Metadata.Name] = p
	}
	return pods, nil
}

// writeManifest writes a static pod manifest atomically (kubelet must never
// read half a file): a dotfile, which kubelet ignores, then a rename.
func (k *kubeletRun) writeManifest(name, content string) {
	k.t.Helper()
	tmp := filepath.Join(k.manifests, "."+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.manifests, name)); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kubeletRun) removeManifest(name string) {
	k.t.Helper()
	if err := os.Remove(filepath.Join(k.manifests, name)); err != nil {
		k.t.Fatal(err)
	}
}

func kubeletLogDigest(log string) string {
	var errs []string
	lines := strings.Split(log, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "E") && !strings.Contains(l, "eviction") && !strings.Contains(l, "cri_stats_provider") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 40 {
		errs = errs[len(errs)-40:]
	}
	return strings.Join(errs, "\n") + "\n...\n" + tail(log, 30)
}

// checkCrictlSees: crictl through crimux lists both pods ready and both
// containers running, with the IDs kubelet reports.
func checkCrictlSees(t *testing.T, c *daemonRun, ctrID, vmID string) {
	t.Helper()
	var ps struct {
		Containers []struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"containers"`
	}
	mustJSON(t, c.crictl("ps", "-o", "json", "--label", "io.kubernetes.pod.namespace="+kubeletNamespace), &ps)
	states := map[string]string{}
	for _, x := range ps.Containers {
		states[x.ID] = x.State
	}
	if states[ctrID] != "CONTAINER_RUNNING" || states[vmID] != "CONTAINER_RUNNING" || len(states) != 2 {
		t.Fatalf("crictl ps: %v; want %s and %s running", states, ctrID, vmID)
	}
	// The two, and the pod too small for its VM: its sandbox is up, its
	// container never made (requireRefusedUpFront).
	if out := c.crictl("pods", "--namespace", kubeletNamespace, "--state", "ready", "-q"); len(strings.Fields(out)) != 3 {
		t.Fatalf("crictl pods --state ready: want 3 pods:\n%s", out)
	}
}

func waitLogs(t *testing.T, c *daemonRun, id, marker string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, marker+" in crictl logs "+id, func() error {
		if out, _ := c.crictlErr("logs", id); !strings.Contains(out, marker) {
			return fmt.Errorf("logs so far: %.300q", out)
		}
		return nil
	})
	t.Logf("crictl logs %s shows %s", id, marker)
}

// powerCycle pauses, hibernates and resumes the VM with crimuxctl (the VM
// API); the CRI container stays running throughout.
func powerCycle(t *testing.T, c *daemonRun, vmID, metricsAddr string) {
	t.Helper()
	ctl := os.Getenv("CRIMUX_CTL")
	if ctl == "" {
		ctl = filepath.Join(repoRoot(), "bin", "crimuxctl")
	}
	run := func(args ...string) (string, error) {
		full := append([]string{"--endpoint", c.endpoint, "--timeout", "2m"}, args...)
		out, err := exec.Command(ctl, full...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("-o", "json", "vm", "list"); err != nil || !strings.Contains(out, vmID) {
		t.Fatalf("crimuxctl vm list does not list %s: %v\n%s", vmID, err, out)
	}
	// The VM has virtio-fs shares (its volumes): qemu cannot save it, so
	// Hibernate is refused naming them, and nothing changes.
	if out, err := run("vm", "power", vmID, "hibernate"); err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "virtio-fs") {
		t.Fatalf("crimuxctl vm power %s hibernate: %v\n%s\nwant FailedPrecondition naming virtio-fs", vmID, err, out)
	}
	for _, state := range []string{"paused", "shutdown", "running"} {
		out, err := run("vm", "power", vmID, state)
		if err != nil {
			t.Fatalf("crimuxctl vm power %s %s: %v\n%s", vmID, state, err, out)
		}
		var insp struct {
			Status struct{ State string } `json:"status"`
		}
		mustJSON(t, c.crictl("inspect", "-o", "json", vmID), &insp)
		if insp.Status.State != "CONTAINER_RUNNING" {
			t.Fatalf("after power %s the CRI container is %s, want CONTAINER_RUNNING", state, insp.Status.State)
		}
		// The metrics count the VM in its new power state.
		if err := hasSample(scrapeMetrics(t, metricsAddr), fmt.Sprintf(`crimux_vms{power_state=%q} 1`, state), false); err != nil {
			t.Errorf("after power %s: %v", state, err)
		}
		t.Logf("crimuxctl vm power %s %s: %s", vmID, state, out)
	}
	testutil.Eventually(t, 30*time.Second, "the VM's domain running again", func() error {
		if st := virsh(t, "domstate", domainOf(vmID)); st != "running" {
			return fmt.Errorf("domstate %s", st)
		}
		return nil
	})
}

// checkKubeletMetrics: crimux's metrics after the kubelet drove it.
func checkKubeletMetrics(t *testing.T, addr string) {
	t.Helper()
	text := scrapeMetrics(t, addr)
	for _, want := range []struct {
		series  string
		nonZero bool
	}{
		{`crimux_vms{power_state="running"} 1`, false},
		{`crimux_rpc_duration_seconds_count{api="cri",rpc="StartContainer",runtime="vm"}`, true},
		{`crimux_rpc_duration_seconds_count{api="cri",rpc="RunPodSandbox",runtime="containerd"}`, true},
		{`crimux_rpc_duration_seconds_count{api="cri",rpc="RuntimeConfig",runtime="all"}`, true},
		{`crimux_runtime_ready{runtime="vm",type="vm"} 1`, false},
		{`crimux_runtime_ready{runtime="containerd",type="container"} 1`, false},
	} {
		if err := hasSample(text, want.series, want.nonZero); err != nil {
			t.Errorf("metrics after the kubelet run: %v", err)
		}
	}
	var vmAPI []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, `crimux_rpc_duration_seconds_count{api="vm"`) {
			vmAPI = append(vmAPI, l)
		}
	}
	sort.Strings(vmAPI)
	t.Logf("VM API calls in the metrics: %q", vmAPI)
}

// The bed's qemu wrapper asks /run/crimux/placement.sock, which every
// crimux of the other tests serves too; this test's crimux and wrapper use
// a socket of their own (as test/bench does), so nothing else running on
// the machine can refuse its VM. In /run/crimux, which node two of the bed
// binds a dir of its own over (test/bed/node2-up.sh): the one wrapper
// reaches each node's own crimux, node two's too, and a VM that migrates
// between the cluster's two nodes, keeping its <emulator>, is placed by
// the crimux of the node it runs on. One of each per bed instance: the
// two host lanes run side by side.
var (
	kubeletPlacementSocket = "/run/crimux/" + bedInstance("kubelet-e2e") + "-placement.sock"
	kubeletWrapper         = "/usr/local/lib/crimux/" + bedInstance("crimux-qemu-wrapper-kubelet-e2e")
)

// installKubeletWrapper installs crimux-qemu-wrapper asking
// kubeletPlacementSocket where libvirt's qemu user can run it (the
// directory test/bed/libvirt-up.sh makes), only when it or qemu changed:
// libvirt caches what qemu can do by the emulator's ctime.
func installKubeletWrapper(t *testing.T) string {
	t.Helper()
	installQemuWrapper(t, kubeletWrapper, kubeletPlacementSocket)
	return kubeletWrapper
}

func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// prepareKubeletCgroups makes kubelet's cgroupRoot in every hierarchy
// (kubelet refuses a root that is missing) and removes everything under
// it at the end.
func prepareKubeletCgroups(t *testing.T) {
	t.Helper()
	prepareCgroupRoot(t, kubeletCgroup)
}

// prepareCgroupRoot is prepareKubeletCgroups of another kubelet's root.
func prepareCgroupRoot(t *testing.T, root string) {
	t.Helper()
	for _, d := range cgroupDirs(root) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(d), "cgroup.procs")); err != nil {
			continue // not a cgroup hierarchy
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range cgroupDirs(root) {
			removeCgroupDirs(d)
		}
	})
}

// removeCgroupDirs removes a cgroup directory and every one below it,
// deepest first (cgroup directories are removed with rmdir, one by one).
func removeCgroupDirs(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// commandIn is exec.Command run through prefix (another node's
// namespaces: test/bed/node2-exec.sh); nil: as it is.
func commandIn(prefix []string, name string, args ...string) *exec.Cmd {
	if len(prefix) == 0 {
		return exec.Command(name, args...)
	}
	return exec.Command(prefix[0], append(append(prefix[1:len(prefix):len(prefix)], name), args...)...)
}

// unmountUnderIn is unmountUnder in the mount namespace prefix enters
// (test/bed/node2-exec.sh: node two's, whose mounts this one does not see).
func unmountUnderIn(prefix []string, dir string) {
	if len(prefix) == 0 {
		unmountUnder(dir)
		return
	}
	const script = `findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r | xargs -r -n1 umount -l`
	_ = commandIn(prefix, "sh", "-c", script, "sh", dir).Run()
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// removeKubeletPods removes, through crimux, whatever pods of this test a
// failed run left behind.
func removeKubeletPods(c *daemonRun) {
	out, _ := c.crictlErr("pods", "--namespace", kubeletNamespace, "-q")
	for _, id := range strings.Fields(out) {
		_, _ = c.crictlErr("rmp", "-f", id)
	}
}

// requireRefusedUpFront: kubelet shows the pod's container waiting with
// crimux's refusal (FailedPrecondition naming the fix), never started and
// never restarted.
func requireRefusedUpFront(t *testing.T, k *kubeletRun, name string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, name+" refused at CreateContainer", func() error {
		pods, err := k.pods()
		if err != nil {
			return err
		}
		st := pods[name].Status.ContainerStatuses
		if len(st) != 1 || st[0].State.Waiting == nil {
			b, _ := json.Marshal(pods[name].Status)
			return fmt.Errorf("status %s", b)
		}
		w := st[0].State.Waiting
		if st[0].RestartCount != 0 || st[0].ContainerID != "" || w.Reason != "CreateContainerError" ||
			!strings.Contains(w.Message, "RuntimeClass vm") || !strings.Contains(w.Message, "128 MiB") {
			return fmt.Errorf("waiting %s: %q, restarts %d, container %q", w.Reason, w.Message, st[0].RestartCount, st[0].ContainerID)
		}
		return nil
	})
}

// prepareConfigDir makes vmManifest's hostPath directory with one file.
func prepareConfigDir(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(kubeletConfigDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(kubeletConfigDir) })
	writeFile(t, filepath.Join(kubeletConfigDir, "settings"), "CRIMUX-CONFIG-ONE")
}

// checkVMVolumes: the VM pod's emptyDir and its read-only ConfigMap-like
// directory reach the guest as virtio-fs shares named after their mount
// paths; the guest's write lands in kubelet's emptyDir, a change of the
// directory on the host shows in the guest.
func checkVMVolumes(t *testing.T, c *daemonRun, k *kubeletRun, vmID string) {
	t.Helper()
	v := &testVM{c: c.crimux, ctrID: vmID, domain: domainOf(vmID)}
	for tag, dir := range map[string]string{"scratch": "/scratch", "etc-app": "/etc/app"} {
		v.guestOutput(t, fmt.Sprintf("grep -q ' %s ' /proc/mounts || (mkdir -p %s && mount -t virtiofs %s %s); echo ok", dir, dir, tag, dir))
	}
	if got := v.guestOutput(t, "cat /etc/app/settings"); got != "CRIMUX-CONFIG-ONE" {
		t.Fatalf("/etc/app/settings in the guest: %q", got)
	}
	if out := v.guestRun(t, "echo x >/etc/app/written"); strings.HasPrefix(out, "0:") {
		t.Fatalf("the guest wrote into the read-only volume (%s)", out)
	}
	v.guestOutput(t, "echo CRIMUX-SCRATCH >/scratch/from-guest && echo ok")
	found, _ := filepath.Glob(filepath.Join(k.dir, "root", "pods", "*", "volumes", "kubernetes.io~empty-dir", "scratch", "from-guest"))
	if len(found) != 1 {
		t.Fatalf("the guest's file in kubelet's emptyDir: %v", found)
	}
	writeFile(t, filepath.Join(kubeletConfigDir, "settings"), "CRIMUX-CONFIG-TWO")
	testutil.Eventually(t, 20*time.Second, "the updated volume in the guest", func() error {
		if got := v.guestOutput(t, "cat /etc/app/settings"); got != "CRIMUX-CONFIG-TWO" {
			return fmt.Errorf("guest reads %q", got)
		}
		return nil
	})
	t.Log("the emptyDir and the read-only directory reach the guest; the guest's write and the host's change both show")
}

// waitSandboxesGone waits until crimux holds no sandbox of namespace:
// kubelet removes a stopped sandbox on its once-a-minute cleanup.
func waitSandboxesGone(t *testing.T, c *daemonRun, namespace string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "the pods' sandboxes removed", func() error {
		if out := c.crictl("pods", "--namespace", namespace, "-q"); out != "" {
			return fmt.Errorf("crictl pods: %s", out)
		}
		return nil
	})
}
