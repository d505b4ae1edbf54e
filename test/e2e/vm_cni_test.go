package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// CNI 1.1 for VM pods against the bed's real plugins
// (containernetworking/plugins v1.10.0 in bed.cniBinDir): GC releases what
// host-local holds for attachments nobody has, STATUS decides the VM
// runtime's network readiness.

// vmGCInterval is the collector's period TestVMNetworkGC runs crimux
// with ([libvirt] gc_interval; a minute by default).
const vmGCInterval = 5 * time.Second

// cni11ConfDir is the bed's network config at cniVersion 1.1.0, in a
// conf dir of the test's own: the same network (name, bridge, host-local
// data dir), so its pods share the bed's pool with containerd's. (The
// bed writes 1.1.0 itself, but leaves the file alone while a containerd
// started with an older config runs: see test/bed/up.sh.)
func cni11ConfDir(t *testing.T) (dir string, conflist map[string]any) {
	t.Helper()
	src := filepath.Join(bed.cniConfDir, bedConflist)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("the bed's network config: %v", err)
	}
	if err := json.Unmarshal(b, &conflist); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if v := conflist["cniVersion"]; v != "1.1.0" {
		t.Logf("the bed's network config is at cniVersion %v (its containerd runs an older config); this test's copy is at 1.1.0", v)
	}
	conflist["cniVersion"] = "1.1.0"
	dir = t.TempDir()
	out, _ := json.Marshal(conflist)
	if err := os.WriteFile(filepath.Join(dir, bedConflist), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, conflist
}

// leakAddress allocates an address from host-local directly, as ADD by
// a runtime that crashed before it recorded anything would leave it:
// the bridge plugin's config (name and version injected) on stdin,
// CNI_COMMAND=ADD, an attachment ID nobody knows.
func leakAddress(t *testing.T, conflist map[string]any, id string) string {
	t.Helper()
	plugin := map[string]any{}
	for k, v := range conflist["plugins"].([]any)[0].(map[string]any) {
		plugin[k] = v
	}
	plugin["name"], plugin["cniVersion"] = conflist["name"], conflist["cniVersion"]
	stdin, _ := json.Marshal(plugin)
	cmd := exec.Command(filepath.Join(bed.cniBinDir, "host-local"))
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_IFNAME=eth0",
		"CNI_NETNS=/var/run/netns/" + id, "CNI_PATH=" + bed.cniBinDir}
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host-local ADD for %s: %v\n%s", id, err, out)
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("host-local ADD for %s answered %s (%v)", id, out, err)
	}
	ip, _, _ := strings.Cut(res.IPs[0].Address, "/")
	requireAllocation(t, ip, id)
	return ip
}

// allocationOf is who host-local's file for ip names ("" if none).
func allocationOf(ip string) string {
	b, err := os.ReadFile(filepath.Join(bed.ipamDir, ip))
	if err != nil {
		return ""
	}
	id, _, _ := strings.Cut(string(b), "\r\n")
	return strings.TrimSpace(id)
}

func requireAllocation(t *testing.T, ip, id string) {
	t.Helper()
	if got := allocationOf(ip); !strings.Contains(got, id) {
		t.Fatalf("host-local's allocation of %s names %q, want %s", ip, got, id)
	}
}

// TestVMNetworkGC: an address host-local allocated for an attachment
// nobody has (CNI ADD with no runtime behind it) is released by crimux's
// CNI GC, the one after its start-up recovery and the periodic one,
// while a running VM pod and a container pod (containerd's, on the same
// network) keep theirs and the guest keeps answering.
func TestVMNetworkGC(t *testing.T) {
	requireVM(t)
	confDir, conflist := cni11ConfDir(t)
	cfg := writeJSON(t, "crimux.toml", fmt.Sprintf("[libvirt]\ngc_interval = %q\n", vmGCInterval))
	c := startCrimux(t, bed.containerd, "--config", cfg, "--vm-accel", "tcg", "--cni-conf-dir", confDir)
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	vmPod, _, start := startVMNetPod(t, c, "vm-gc", parent, 0, "")
	vm := snapshotPodNet(t, c, vmPod)
	requirePodIPAnswers(t, c, vmPod, 60*time.Second-time.Since(start))
	ctrPod := c.crictl("runp", podJSON(t, "ctr-gc", ""))
	t.Cleanup(func() { c.crictlErr("rmp", "-f", ctrPod) })
	ctrIP := podIP(t, c, ctrPod)
	requireAllocation(t, ctrIP, ctrPod)

	run := time.Now().UnixNano() % 1e9
	leaked := leakAddress(t, conflist, fmt.Sprintf("crimuxleak%dstart", run))
	t.Cleanup(func() { os.Remove(filepath.Join(bed.ipamDir, leaked)) })
	restarted := time.Now()
	c.restart() // the GC after start-up recovery
	waitReleased(t, leaked, 60*time.Second)
	t.Logf("leaked %s released %.1f s after the restart", leaked, time.Since(restarted).Seconds())
	keptAddresses(t, c, vm, vmPod, ctrIP, ctrPod)

	leaked = leakAddress(t, conflist, fmt.Sprintf("crimuxleak%dperiodic", run))
	t.Cleanup(func() { os.Remove(filepath.Join(bed.ipamDir, leaked)) })
	waitReleased(t, leaked, vmGCInterval+60*time.Second)
	t.Logf("leaked %s released by the periodic pass, %.1f s after the restart", leaked, time.Since(restarted).Seconds())
	keptAddresses(t, c, vm, vmPod, ctrIP, ctrPod)
}

func waitReleased(t *testing.T, ip string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, "host-local's leaked allocation of "+ip+" released by CNI GC", func() error {
		if id := allocationOf(ip); id != "" {
			return fmt.Errorf("%s still allocated to %s", ip, id)
		}
		return nil
	})
}

// keptAddresses: the VM pod and the container pod still hold their
// addresses, and the guest still answers on its own.
func keptAddresses(t *testing.T, c *crimux, vm *podNetSnapshot, vmPod, ctrIP, ctrPod string) {
	t.Helper()
	requireAllocation(t, vm.ip, vm.sandboxID)
	requireAllocation(t, ctrIP, ctrPod)
	requirePodIPAnswers(t, c, vmPod, 30*time.Second)
}

// vmNetworkCondition is the VM runtime's network condition as crictl
// info shows it (crimux's status conditions).
func vmNetworkCondition(t *testing.T, c *crimux) (ready bool, message string) {
	t.Helper()
	var info struct {
		Status struct {
			Conditions []struct {
				Type    string `json:"type"`
				Status  bool   `json:"status"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"conditions"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("info"), &info)
	for _, cond := range info.Status.Conditions {
		if cond.Type == "VMNetworkReady" {
			return cond.Status, cond.Reason + ": " + cond.Message
		}
	}
	t.Fatalf("crictl info shows no VMNetworkReady condition: %+v", info.Status.Conditions)
	return false, ""
}

// TestVMNetworkStatus: the bridge plugin's STATUS asks its IPAM plugin
// (host-local) in turn, and fails when it cannot find it — a real
// failure, as a half-done plugin upgrade leaves a node. Then crictl info
// shows the VM runtime's network not ready with the plugin's message, a
// new VM pod is refused naming it, and a running VM keeps its address
// and answers; with host-local back, both recover.
func TestVMNetworkStatus(t *testing.T) {
	requireVM(t)
	confDir, _ := cni11ConfDir(t)
	bin := linkedCNIBinDir(t)
	cfg := writeJSON(t, "crimux.toml", fmt.Sprintf("[libvirt]\ncni_bin_dirs = [%q]\n", bin))
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", cfg, "--cni-conf-dir", confDir)
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	if ready, msg := vmNetworkCondition(t, c); !ready {
		t.Fatalf("VMNetworkReady with every plugin in place: %s", msg)
	}
	running, _, start := startVMNetPod(t, c, "vm-status-running", parent, 0, "")
	requirePodIPAnswers(t, c, running, 60*time.Second-time.Since(start))
	snap := snapshotPodNet(t, c, running)

	if err := os.Remove(filepath.Join(bin, "host-local")); err != nil {
		t.Fatal(err)
	}
	ready, msg := vmNetworkCondition(t, c)
	if ready || !strings.Contains(msg, "NetworkPluginNotReady") || !strings.Contains(msg, `plugin bridge: failed to find plugin "host-local"`) {
		t.Fatalf("VMNetworkReady with host-local gone: ready=%v %q; want false with the plugin's message", ready, msg)
	}
	t.Logf("crictl info: VMNetworkReady false, %s", msg)
	out, err := c.crictlErr("runp", "--runtime", "vm", vmNetPodJSON(t, "vm-status-refused", parent, 0))
	if err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "plugin bridge: failed to find plugin") || !strings.Contains(out, "host-local") {
		t.Fatalf("runp with the network not ready: %v, %s; want FailedPrecondition naming the plugin and its message", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=error") {
			t.Logf("runp refused: %s", line)
		}
	}
	requireAllocation(t, snap.ip, snap.sandboxID)
	requirePodIPAnswers(t, c, running, 30*time.Second)

	if err := os.Symlink(filepath.Join(bed.cniBinDir, "host-local"), filepath.Join(bin, "host-local")); err != nil {
		t.Fatal(err)
	}
	if ready, msg := vmNetworkCondition(t, c); !ready {
		t.Fatalf("VMNetworkReady with host-local back: %s", msg)
	}
	again := c.crictl("runp", "--runtime", "vm", vmNetPodJSON(t, "vm-status-again", parent, 0))
	t.Cleanup(func() { c.crictlErr("rmp", "-f", again) })
	if ip := podIP(t, c, again); !strings.HasPrefix(ip, "10.88.77.") {
		t.Fatalf("the pod made after recovery has IP %q", ip)
	}
}
