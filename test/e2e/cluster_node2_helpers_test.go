package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Node two of the test bed (test/bed/node2-up.sh) as a second node of the
// bed's cluster: a kubelet and a crimux in node two's namespaces,
// registered as node2Name. They reach kube-apiserver at node two's own
// 127.0.0.1:16443, which node2-up.sh bridges to the host's; kube-apiserver
// reaches the kubelet at node two's address, 10.231.0.2. What would
// collide with node one's is node two's own: /run/crimux (crimux's
// placement socket and pod network namespaces) and /var/lib/kubelet
// (kubelet's device-plugin and pod-resources sockets) by node2-up.sh's
// mounts, the kubelet's cgroupRoot here.
const (
	node2Name          = "crimux-e2e-node2" // test/cluster/lib.sh's NODE2_NAME
	node2KubeletCgroup = "/crimux-kubelet-e2e-node2"
)

// clusterNodeTwo is node two's kubelet, with the node credentials
// test/cluster/pki made for it.
var clusterNodeTwo = clusterKubeletNode{name: node2Name, ip: node2.addr2,
	kubeconfig: filepath.Join(clusterPKI, node2Name, "kubelet.kubeconfig"), cgroupRoot: node2KubeletCgroup,
	prefix: []string{node2.exec}}

// startClusterNodeTwo is startClusterNode on node two: crimux there (on
// node two's containerd, TCG,
// node two's CNI network and VM uid range, the kubelet wrapper's placement
// on node two's own socket, the node agent as node two's, more [libvirt]
// settings in libvirt: TOML lines ending in a newline, e.g.
// migrationSection(2, ...), without vm_id_base) with images pulled, and
// node two's kubelet registered against it; the test's namespace is made.
// Pods crimux holds at the end are removed.
func startClusterNodeTwo(t *testing.T, k8s, libvirt string, images ...string) *crimux {
	t.Helper()
	wrapper := installKubeletWrapper(t)
	prepareCgroupRoot(t, node2KubeletCgroup)
	c := startCrimuxOn(t, []string{node2.exec}, "", node2.containerd, "--vm-accel", "tcg",
		"--config", node2ClusterConfig(t, wrapper, libvirt), "--cni-conf-dir", node2.cniConfDir)
	t.Cleanup(func() { removeClusterPods(c) })
	for _, image := range images {
		if out, err := c.crictlTimeout(10*time.Minute, "pull", image); err != nil {
			t.Fatalf("node two: crictl pull %s: %v\n%s", image, err, out)
		}
	}
	startClusterKubeletOn(t, k8s, c.endpoint, clusterNodeTwo)
	clusterNamespaceFor(t, k8s)
	return c
}

// node2ClusterConfig writes node two's crimux config. The wrapper is node
// one's too (a migrating VM keeps its <emulator>); its placement socket,
// in /run/crimux, is node two's own there.
func node2ClusterConfig(t *testing.T, wrapper, libvirt string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node2-cluster.toml")
	body := fmt.Sprintf("[libvirt]\nemulator = %q\nplacement_socket = %q\nvm_id_base = %d\n%s[kubernetes]\nkubeconfig = %q\nnode_name = %q\n",
		wrapper, kubeletPlacementSocket, node2VMIDBase, libvirt, filepath.Join(clusterPKI, node2Name, "crimux.kubeconfig"), node2Name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// requireNodesReady: kubectl get nodes lists both nodes Ready, node two
// at its own address. (Node one's, the bed bridge's, shows only once a
// first pod on the host made the bridge.)
func requireNodesReady(t *testing.T, k8s string) {
	t.Helper()
	out := kubectl(t, k8s, "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}`)
	nodes := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			nodes[f[0]] = f[1:]
		}
	}
	if n1, n2 := nodes[kubeletNode], nodes[node2Name]; len(n1) < 1 || n1[0] != "True" || len(n2) != 2 || n2[0] != "True" || n2[1] != node2.addr2 {
		t.Fatalf("kubectl get nodes: want %s Ready, %s Ready at %s:\n%s", kubeletNode, node2Name, node2.addr2, out)
	}
	t.Logf("kubectl get nodes (name, Ready, InternalIP):\n%s", out)
}
