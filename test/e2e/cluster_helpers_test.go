package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test bed cluster (test/cluster/up.sh; make e2e-cluster starts it and
// sets CRIMUX_K8S to the directory of its binaries): etcd and
// kube-apiserver on loopback, shared by every cluster test. Each test starts
// its own crimux and a kubelet against it that registers as kubeletNode.
// CRIMUX_CLUSTER_PKI names another control plane's certificates (the
// cgroup-v2 node's own, test/cluster/lib.sh's CLUSTER_INSTANCE).
// CLUSTER_INSTANCE alone names its directory, as test/cluster/lib.sh does.
var clusterPKI = cmp.Or(os.Getenv("CRIMUX_CLUSTER_PKI"), "/var/lib/crimux-testbed/cluster"+instanceSuffix(os.Getenv("CLUSTER_INSTANCE"))+"/pki")

const clusterNamespace = "crimux-cluster-e2e"

// clusterNodeIP is this host's kubelet address: the bed bridge's.
var clusterNodeIP = bed.gateway

// instanceSuffix is "-NAME" of an instance NAME, "" of the default one.
func instanceSuffix(name string) string {
	if name == "" {
		return ""
	}
	return "-" + name
}

// clusterKubeletConfig is a cluster node's KubeletConfiguration: as the
// standalone one (cgroupfs under kubeletCgroup, eviction and image GC out of
// the way) but registered with the API server, serving exec/logs/attach/
// port-forward to kube-apiserver alone (x509 against the cluster CA,
// authorized by the API server), and with a long runtime request timeout:
// the Debian guest's first CreateContainer unpacks hundreds of MiB.
const clusterKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]s
imageServiceEndpoint: %[1]s
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
oomScoreAdj: 0
failSwapOn: false
failCgroupV1: false
port: %[3]d
readOnlyPort: 0
healthzPort: 0
podLogsDir: %[4]s
volumePluginDir: %[5]s
runtimeRequestTimeout: 10m
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization:
  mode: Webhook
` + kubeletConfigNoEviction

// k8sDir is the directory of the test bed's Kubernetes binaries, or skips.
func k8sDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CRIMUX_K8S")
	if dir == "" {
		t.Skip("CRIMUX_K8S is not set (make e2e-cluster builds the cluster, starts it and sets it)")
	}
	return dir
}

// clusterKubeletNode is what differs between the cluster's kubelets: the
// node name, its address (where kube-apiserver reaches kubelet for exec,
// logs, attach and port-forward), its kubeconfig, its cgroupRoot, and the
// command prefix that runs it in its node's namespaces (nil: this host's).
type clusterKubeletNode struct {
	name, ip, kubeconfig, cgroupRoot string
	prefix                           []string
}

// clusterNodeOne is the host's kubelet. Its address: kubelet refuses a
// loopback one, so the test bed bridge's (the pods' gateway) on this host.
var clusterNodeOne = clusterKubeletNode{name: kubeletNode, ip: clusterNodeIP,
	kubeconfig: filepath.Join(clusterPKI, "kubelet.kubeconfig"), cgroupRoot: kubeletCgroup}

// startClusterKubelet starts the host's kubelet against crimux at endpoint.
func startClusterKubelet(t *testing.T, k8s, endpoint string) *kubeletRun {
	t.Helper()
	return startClusterKubeletOn(t, k8s, endpoint, clusterNodeOne)
}

// startClusterKubeletOn starts node n's kubelet against crimux at endpoint
// that registers with the test bed's API server; it is up once its node
// is Ready.
func startClusterKubeletOn(t *testing.T, k8s, endpoint string, n clusterKubeletNode) *kubeletRun {
	t.Helper()
	return startKubeletWith(t, filepath.Join(k8s, "kubelet"), kubeletSetup{
		config: func(k *kubeletRun) string {
			return fmt.Sprintf(clusterKubeletConfig, endpoint, n.cgroupRoot, k.port,
				filepath.Join(k.dir, "logs"), filepath.Join(k.dir, "volume-plugins"), filepath.Join(clusterPKI, "ca.crt"))
		},
		args:   []string{"--kubeconfig", n.kubeconfig, "--node-ip", n.ip},
		ready:  func(*kubeletRun) error { return nodeReady(k8s, n.name) },
		node:   n.name,
		prefix: n.prefix,
		addr:   n.ip,
	})
}

// nodeReady is nil once the API server has the node Ready.
func nodeReady(k8s, node string) error {
	out, err := kubectlErr(k8s, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err == nil && out != "True" {
		err = fmt.Errorf("node %s Ready=%q", node, out)
	}
	return err
}

// kubectlErr runs the test bed's kubectl as the cluster admin.
func kubectlErr(k8s string, args ...string) (string, error) {
	return kubectlIn(k8s, nil, args...)
}

func kubectlIn(k8s string, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(k8s, "kubectl"),
		append([]string{"--kubeconfig", filepath.Join(clusterPKI, "admin.kubeconfig"), "--request-timeout", "90s"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// kubectl runs kubectl and fails the test if it fails.
func kubectl(t *testing.T, k8s string, args ...string) string {
	t.Helper()
	out, err := kubectlErr(k8s, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlApply applies a manifest given as text.
func kubectlApply(t *testing.T, k8s, manifest string) {
	t.Helper()
	if out, err := kubectlIn(k8s, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// clusterNamespaceFor makes the test's namespace with what a controller
// manager would have put in it (this cluster runs none): the "default"
// service account and the kube-root-ca.crt ConfigMap kubelet projects into
// pods. Without a controller manager a namespace is never finalized once
// deleted, so it is kept; its pods (any a failed run left too) are
// force-deleted before and after the test.
func clusterNamespaceFor(t *testing.T, k8s string) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(clusterPKI, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cm, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": "kube-root-ca.crt", "namespace": clusterNamespace},
		"data":     map[string]string{"ca.crt": string(ca)},
	})
	kubectlApply(t, k8s, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: %[1]s}
---
%[2]s
`, clusterNamespace, cm))
	forceDeletePods(k8s)
	t.Cleanup(func() { forceDeletePods(k8s) })
}

// forceDeletePods removes the test namespace's pods from the API server at
// once (kubelet then stops whatever of them still runs).
func forceDeletePods(k8s string) {
	_, _ = kubectlErr(k8s, "-n", clusterNamespace, "delete", "pods", "--all", "--force", "--grace-period=0", "--wait=false")
}

// clusterPod is what the tests read of a pod from the API server.
type clusterPod struct {
	Metadata struct {
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		Phase             string `json:"phase"`
		PodIP             string `json:"podIP"`
		QOSClass          string `json:"qosClass"`
		ContainerStatuses []struct {
			ContainerID  string          `json:"containerID"`
			RestartCount int             `json:"restartCount"`
			Ready        bool            `json:"ready"`
			State        json.RawMessage `json:"state"`
			LastState    struct {
				Terminated *struct {
					ContainerID string `json:"containerID"`
					ExitCode    int    `json:"exitCode"`
					Reason      string `json:"reason"`
				} `json:"terminated"`
			} `json:"lastState"`
			Resources struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"containerStatuses"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

// getPod reads one pod of the test's namespace.
func getPod(k8s, name string) (clusterPod, error) {
	var p clusterPod
	out, err := kubectlErr(k8s, "-n", clusterNamespace, "get", "pod", name, "-o", "json")
	if err != nil {
		return p, fmt.Errorf("%v: %s", err, out)
	}
	return p, json.Unmarshal([]byte(out), &p)
}

// runningID is the pod's one container ID (without "<runtime>://") and
// its restart count, or why the pod is not running.
func (p clusterPod) runningID() (string, int, error) {
	if p.Status.Phase != "Running" || len(p.Status.ContainerStatuses) != 1 {
		return "", 0, fmt.Errorf("phase %q, %d container statuses", p.Status.Phase, len(p.Status.ContainerStatuses))
	}
	cs := p.Status.ContainerStatuses[0]
	if !bytes.Contains(cs.State, []byte(`"running"`)) {
		return "", 0, fmt.Errorf("container state %s", cs.State)
	}
	_, id, _ := strings.Cut(cs.ContainerID, "://")
	return id, cs.RestartCount, nil
}

// startClusterNode starts the test's node of the bed's cluster: crimux
// (TCG, the kubelet wrapper's placement, the node agent on, more [libvirt]
// settings in libvirt: TOML lines ending in a newline, which may open
// sections of [libvirt]'s own, e.g. migrationSection(1, ...)) with images
// pulled, and a kubelet registered against it; the test's namespace is
// made. Pods crimux holds at the end are removed.
func startClusterNode(t *testing.T, k8s, libvirt string, images ...string) *daemonRun {
	t.Helper()
	wrapper := installKubeletWrapper(t)
	prepareKubeletCgroups(t)
	c := startDaemon(t, fmt.Sprintf("metrics_address = \"127.0.0.1:%d\"\n[libvirt]\nemulator = %q\nplacement_socket = %q\n%s[kubernetes]\nkubeconfig = %q\nnode_name = %q\n",
		freePort(t), wrapper, kubeletPlacementSocket, libvirt, filepath.Join(clusterPKI, "crimux.kubeconfig"), kubeletNode), nil, "--vm-accel", "tcg")
	t.Cleanup(func() { removeClusterPods(c.crimux) })
	for _, image := range images {
		if out, err := c.crictlTimeout(10*time.Minute, "pull", image); err != nil {
			t.Fatalf("crictl pull %s: %v\n%s", image, err, out)
		}
	}
	startClusterKubelet(t, k8s, c.endpoint)
	clusterNamespaceFor(t, k8s)
	return c
}
