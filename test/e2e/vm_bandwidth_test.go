package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Traffic shaping of VM pods: a pod's kubernetes.io/ingress-bandwidth and
// kubernetes.io/egress-bandwidth annotations reach the bed's bandwidth
// plugin through CNI's bandwidth capability, as containerd passes a
// container pod's. The plugin puts a token bucket (tbf) on the pod's host
// veth for what reaches the guest, and redirects what the guest sends to
// an ifb with a tbf of its own.

// bandwidthConfDir is the bed's network config with the bandwidth plugin
// chained last, as test/bed/up.sh writes it, in a conf dir of the test's
// own: a containerd started with an older config keeps the bed's file as
// it was (up.sh says so).
func bandwidthConfDir(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(bed.cniBinDir, "bandwidth")); err != nil {
		t.Fatalf("the bandwidth plugin is not in %s (make bed installs it): %v", bed.cniBinDir, err)
	}
	dir, conflist := cni11ConfDir(t)
	plugins, _ := conflist["plugins"].([]any)
	for _, p := range plugins {
		if p.(map[string]any)["type"] == "bandwidth" {
			return dir
		}
	}
	conflist["plugins"] = append(plugins, map[string]any{"type": "bandwidth", "capabilities": map[string]any{"bandwidth": true}})
	out, _ := json.Marshal(conflist)
	if err := os.WriteFile(filepath.Join(dir, bedConflist), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// qdiscs is `tc qdisc show` of a host interface.
func qdiscs(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("tc", "qdisc", "show", "dev", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("tc qdisc show dev %s: %v\n%s", dev, err, out)
	}
	return string(out)
}

// redirectTo is the device the ingress filter of dev redirects to (the
// bandwidth plugin's ifb), "" if none.
func redirectTo(t *testing.T, dev string) string {
	t.Helper()
	out, _ := exec.Command("tc", "filter", "show", "dev", dev, "parent", "ffff:").CombinedOutput()
	if m := regexp.MustCompile(`Redirect to device (\S+)\)`).FindStringSubmatch(string(out)); m != nil {
		return m[1]
	}
	return ""
}

// requireTBF: dev has a token bucket at rate (tc's notation, "10Mbit").
func requireTBF(t *testing.T, dev, rate string) {
	t.Helper()
	if q := qdiscs(t, dev); !strings.Contains(q, "qdisc tbf") || !strings.Contains(q, "rate "+rate+" ") {
		t.Fatalf("%s has no token bucket at %s:\n%s", dev, rate, q)
	}
}

// TestVMNetworkBandwidth: a VM pod annotated with 10M in and 20M out gets
// a tbf at 10Mbit on its host veth and one at 20Mbit on the ifb its
// veth's ingress is redirected to, and its guest still leases its address
// and answers through them; a pod without the annotations gets neither;
// a bad annotation is refused naming it; stopp removes the ifb.
func TestVMNetworkBandwidth(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--cni-conf-dir", bandwidthConfDir(t))
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)

	pod := vmPodJSON(t, "vm-shaped", parent, `"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "20M"`)
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	shaped := snapshotPodNet(t, c, podID)
	requireTBF(t, shaped.hostVeth, "10Mbit")
	ifb := redirectTo(t, shaped.hostVeth)
	if !strings.HasPrefix(ifb, "bwp") {
		t.Fatalf("the ingress of %s is redirected to %q, want the bandwidth plugin's ifb (bwp…):\n%s", shaped.hostVeth, ifb, qdiscs(t, shaped.hostVeth))
	}
	requireTBF(t, ifb, "20Mbit")
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmNetMemory, ""), pod)
	start := time.Now()
	c.crictl("start", ctrID)
	requirePodIPAnswers(t, c, podID, within(t, 60*time.Second))
	t.Logf("shaped: %s tbf 10Mbit, %s tbf 20Mbit; the guest answered %.1f s after start", shaped.hostVeth, ifb, time.Since(start).Seconds())

	plain := vmPodJSON(t, "vm-unshaped", parent, "")
	plainID := c.crictl("runp", "--runtime", "vm", plain)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", plainID) })
	unshaped := snapshotPodNet(t, c, plainID)
	if q := qdiscs(t, unshaped.hostVeth); strings.Contains(q, "tbf") || strings.Contains(q, "ingress") || redirectTo(t, unshaped.hostVeth) != "" {
		t.Fatalf("a pod without bandwidth annotations is shaped on %s:\n%s", unshaped.hostVeth, q)
	}

	bad := vmPodJSON(t, "vm-badly-shaped", parent, `"kubernetes.io/egress-bandwidth": "fast"`)
	if out, err := c.crictlErr("runp", "--runtime", "vm", bad); err == nil ||
		!strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "kubernetes.io/egress-bandwidth") {
		t.Fatalf("runp with egress-bandwidth \"fast\": %v: %s; want InvalidArgument naming the annotation", err, out)
	}
	if pods := c.crictl("pods", "--name", "vm-badly-shaped", "-q"); pods != "" {
		t.Fatalf("a refused pod is listed: %s", pods)
	}

	c.crictl("stopp", podID)
	if _, err := os.Lstat(filepath.Join("/sys/class/net", ifb)); err == nil {
		t.Fatalf("ifb %s left after stopp (CNI DEL)", ifb)
	}
	shaped.assertReleased(t, "after stopp")
	c.crictl("rmp", podID)
	c.crictl("rmp", "-f", plainID)
	unshaped.assertReleased(t, "after rmp")
	assertNoVMFiles(t, c)
}
