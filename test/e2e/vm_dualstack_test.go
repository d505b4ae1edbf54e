package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/crimux/crimux/internal/testutil"
)

// Dual stack and IPv6: the bed's network gives every pod an IPv4 and an
// IPv6 address (fd00:88:77::/64); the test VM takes its IPv6 address from
// crimux's router advertisement and DHCPv6 (crimux-dhcp6c in its
// initramfs), prints CRIMUX-NET6: <ip> and CRIMUX-DNS6: <servers>, and
// answers HTTP on :8080 over both families.

const (
	vmNet6Marker = "CRIMUX-NET6: "
	vmDNS6Marker = "CRIMUX-DNS6: "
	// dns6 is the pod's IPv6 name server (only handed out, never asked).
	dns6 = "fd00:96::a"
)

// dualStackPodJSON is vmNetPodJSON with a name server of each family.
func dualStackPodJSON(t *testing.T, name, parent string) string {
	return writeJSON(t, "vmpod6.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "crimux-e2e", "uid": "%s-uid-%d", "attempt": 0},
  "hostname": %q,
  "log_directory": %q,
  "dns_config": {"servers": ["10.96.0.10", %q], "searches": ["crimux-e2e.svc.cluster.local"]},
  "linux": {"cgroup_parent": %q}
}`, name, name, time.Now().UnixNano(), name, t.TempDir(), dns6, parent))
}

// podIPs are the pod IP and the additional IPs crictl inspectp reports.
func podIPs(t *testing.T, c *crimux, podID string) (string, []string) {
	t.Helper()
	var insp struct {
		Status struct {
			Network struct {
				IP            string `json:"ip"`
				AdditionalIPs []struct {
					IP string `json:"ip"`
				} `json:"additionalIps"`
			} `json:"network"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("inspectp", "-o", "json", podID), &insp)
	var extra []string
	for _, a := range insp.Status.Network.AdditionalIPs {
		extra = append(extra, a.IP)
	}
	return insp.Status.Network.IP, extra
}

// startDualStackVM runs a VM pod with both name servers and starts it.
func startDualStackVM(t *testing.T, c *crimux, name, parent string) (string, string) {
	t.Helper()
	pod := dualStackPodJSON(t, name, parent)
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmNetMemory, ""), pod)
	c.crictl("start", ctrID)
	return podID, ctrID
}

// startClientPod runs a container pod (containerd, the bed's dual-stack
// network) with a busybox to fetch from the guest.
func startClientPod(t *testing.T, c *crimux, name string) string {
	t.Helper()
	c.crictl("pull", busyboxImage)
	cpod := podJSON(t, name, "")
	cpodID := c.crictl("runp", cpod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", cpodID) })
	client := c.crictl("create", cpodID, containerJSON(t, "client", busyboxImage, []string{"sleep", "3600"}), cpod)
	c.crictl("start", client)
	return client
}

// requireConsole waits for every line of want on the VM's console.
func requireConsole(t *testing.T, c *crimux, ctrID string, timeout time.Duration, want ...string) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("%q on the guest's console", want), func() error {
		logs, _ := c.crictlErr("logs", ctrID)
		for _, w := range want {
			if !strings.Contains(logs, w) {
				return fmt.Errorf("console so far:\n%s", logs)
			}
		}
		return nil
	})
}

// requireContainerReaches: the container fetches the guest's page at ip.
func requireContainerReaches(t *testing.T, c *crimux, client, ip string) {
	t.Helper()
	testutil.Eventually(t, within(t, 20*time.Second), "the container reaching the VM at "+ip, func() error {
		get := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d`, ip, vmHTTPPort)
		out, err := c.crictlErr("exec", client, "sh", "-c", get)
		if err == nil && !strings.Contains(out, vmHTTPAnswer) {
			err = fmt.Errorf("answer %q", out)
		}
		return err
	})
}

// requirePortForward: crictl port-forward to the guest's HTTP port.
func requirePortForward(t *testing.T, c *crimux, podID string) {
	t.Helper()
	local := portForward(t, c, podID, vmHTTPPort)
	requireGuestHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/", local), within(t, 10*time.Second))
}

// TestVMDualStack: a VM pod on the bed's dual-stack network: crictl
// inspectp shows its IPv4 address as the pod IP and its IPv6 one in
// additional_ips, the guest configures both (DHCP; router advertisement
// and DHCPv6, with the IPv6 name server), the node and a container pod
// reach it over each family, and crictl port-forward reaches it.
func TestVMDualStack(t *testing.T) {
	parallel(t)
	c, parent := startVMCrimux(t)
	client := startClientPod(t, c, "ds-client")
	podID, ctrID := startDualStackVM(t, c, "vm-ds", parent)
	start := time.Now()

	ip, extra := podIPs(t, c, podID)
	if !strings.HasPrefix(ip, "10.88.77.") || len(extra) != 1 || !strings.HasPrefix(extra[0], "fd00:88:77::") {
		t.Fatalf("crictl inspectp: ip %q, additional %q; want 10.88.77.x and fd00:88:77::x", ip, extra)
	}
	ip6 := extra[0]
	requireConsole(t, c, ctrID, 60*time.Second, vmNetMarker+ip+"/24", vmNet6Marker+ip6, vmDNS6Marker+dns6)
	t.Logf("guest has %s and %s %.1f s after start", ip, ip6, time.Since(start).Seconds())
	requireGuestHTTP(t, fmt.Sprintf("http://%s/", net.JoinHostPort(ip, fmt.Sprint(vmHTTPPort))), within(t, 10*time.Second))
	requireGuestHTTP(t, fmt.Sprintf("http://%s/", net.JoinHostPort(ip6, fmt.Sprint(vmHTTPPort))), within(t, 10*time.Second))
	requireContainerReaches(t, c, client, ip)
	requireContainerReaches(t, c, client, ip6)
	requirePortForward(t, c, podID)
	t.Logf("node, container and port-forward reached the guest %.1f s after start", time.Since(start).Seconds())
}

// ipv6OnlyConfDir is a network of its own with IPv6 alone (bridge
// crimuxbr6, fd00:88:78::/64), routed by the node to and from the bed's.
func ipv6OnlyConfDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	conf := map[string]any{
		"cniVersion": "1.1.0", "name": "crimux-e2e-ipv6",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": "crimuxbr6", "isGateway": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": "fd00:88:78::/64"}}},
					"routes": []map[string]string{{"dst": "::/0"}}, "dataDir": filepath.Join(dir, "ipam")}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(filepath.Join(dir, "10-ipv6.conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("crimuxbr6"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	return dir
}

// TestVMIPv6Only: a VM pod on an IPv6-only network: its one address is
// the pod IP, the guest takes it (router advertisement, DHCPv6) with the
// name server, the node reaches it, a container pod of the bed's network
// reaches it through the node (the guest answering through its default
// router, crimux in the pod's namespace), and crictl port-forward (which
// dials the IPv6 address) reaches it.
func TestVMIPv6Only(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--cni-conf-dir", ipv6OnlyConfDir(t))
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	client := startClientPod(t, c, "v6-client")
	podID, ctrID := startDualStackVM(t, c, "vm-v6", parent)
	start := time.Now()

	ip, extra := podIPs(t, c, podID)
	if !strings.HasPrefix(ip, "fd00:88:78::") || len(extra) != 0 {
		t.Fatalf("crictl inspectp: ip %q, additional %q; want fd00:88:78::x alone", ip, extra)
	}
	requireConsole(t, c, ctrID, 60*time.Second, vmNet6Marker+ip, vmDNS6Marker+dns6)
	t.Logf("guest has %s %.1f s after start", ip, time.Since(start).Seconds())
	requireGuestHTTP(t, fmt.Sprintf("http://%s/", net.JoinHostPort(ip, fmt.Sprint(vmHTTPPort))), within(t, 10*time.Second))
	requireContainerReaches(t, c, client, ip)
	requirePortForward(t, c, podID)
	t.Logf("node, container and port-forward reached the guest %.1f s after start", time.Since(start).Seconds())
}
