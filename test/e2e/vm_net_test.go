package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// VM pod networking (runtimes/libvirt/podnet) against the bed's real CNI
// network (bridge crimuxbr0, host-local IPAM, portmap, bandwidth), the
// one its containerd gives container pods. The test VM's /init leases
// eth0 by DHCP, prints CRIMUX-NET: <ip>/<prefix> and answers HTTP on
// :8080.

const (
	vmHTTPPort   = 8080
	vmHTTPAnswer = "CRIMUX-VM-HTTP"
	vmNetMarker  = "CRIMUX-NET: "
	// vmNetMemory is the smallest guest this kernel boots in (TESTBED.md).
	vmNetMemory = 128 << 20
)

// vmNetPodJSON is a VM pod config with a hostname, DNS and, when hostPort
// is set, a port mapping to the guest's HTTP responder.
func vmNetPodJSON(t *testing.T, name, parent string, hostPort int) string {
	ports := ""
	if hostPort != 0 {
		ports = fmt.Sprintf(`"port_mappings": [{"protocol": 0, "container_port": %d, "host_port": %d}],`, vmHTTPPort, hostPort)
	}
	return writeJSON(t, "vmnetpod.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "crimux-e2e", "uid": "%s-uid-%d", "attempt": 0},
  "hostname": %q,
  "log_directory": %q,
  "dns_config": {"servers": ["10.96.0.10"], "searches": ["crimux-e2e.svc.cluster.local"]},
  %s
  "linux": {"cgroup_parent": %q}
}`, name, name, time.Now().UnixNano(), name, t.TempDir(), ports, parent))
}

// podIP is the IP crictl inspectp reports for a pod.
func podIP(t *testing.T, c *crimux, podID string) string {
	t.Helper()
	var insp struct {
		Status struct {
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("inspectp", "-o", "json", podID), &insp)
	return insp.Status.Network.IP
}

// httpGet fetches url with a short timeout.
func httpGet(url string) (string, error) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// startVMCrimux starts crimux (TCG) with the VM image pulled, and names a
// pod cgroup parent of the test's own, removed at cleanup.
func startVMCrimux(t *testing.T) (*crimux, string) {
	t.Helper()
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	return c, parent
}

// requirePodIPAnswers waits for the guest's HTTP responder on the pod's
// IP, as crictl inspectp reports it.
func requirePodIPAnswers(t *testing.T, c *crimux, podID string, timeout time.Duration) {
	t.Helper()
	requireGuestHTTP(t, fmt.Sprintf("http://%s:%d/", podIP(t, c, podID), vmHTTPPort), timeout)
}

// requireGuestHTTP waits until url answers with the test VM's page.
func requireGuestHTTP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, "the guest answering at "+url, func() error {
		body, err := httpGet(url)
		if err == nil && !strings.Contains(body, vmHTTPAnswer) {
			err = fmt.Errorf("answer %q", body)
		}
		return err
	})
}

// startVMNetPod runs a VM pod with a network and starts its VM; it
// returns the pod and container IDs and when the start was asked.
func startVMNetPod(t *testing.T, c *crimux, name, parent string, hostPort int, ctrAnnotations string) (string, string, time.Time) {
	t.Helper()
	pod := vmNetPodJSON(t, name, parent, hostPort)
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmNetMemory, ctrAnnotations), pod)
	start := time.Now()
	c.crictl("start", ctrID)
	return podID, ctrID, start
}

// TestVMNetwork: a VM pod gets a pod IP from the node's CNI config, the
// guest leases it by DHCP, and from the host the IP crictl inspectp
// reports answers within 15 s of the start; a port mapping (portmap)
// reaches the guest too; removal gives everything back.
func TestVMNetwork(t *testing.T) {
	parallel(t)
	c, parent := startVMCrimux(t)
	hostPort := freePort(t)
	podID, ctrID, start := startVMNetPod(t, c, "vm-net", parent, hostPort, "")

	ip := podIP(t, c, podID)
	if !strings.HasPrefix(ip, "10.88.77.") {
		t.Fatalf("crictl inspectp reports IP %q, want one of the bed's 10.88.77.0/24", ip)
	}
	leak := snapshotPodNet(t, c, podID)
	requirePodIPAnswers(t, c, podID, within(t, 15*time.Second)-time.Since(start))
	t.Logf("pod IP %s answered %.1f s after start", ip, time.Since(start).Seconds())
	if logs := c.crictl("logs", ctrID); !strings.Contains(logs, vmNetMarker+ip+"/24") {
		t.Fatalf("the guest did not lease %s/24 (console):\n%s", ip, logs)
	}

	// portmap: the host port reaches the guest (through the host's address
	// on the bridge, as from another node).
	gw := strings.Join(strings.Split(ip, ".")[:3], ".") + ".1"
	requireGuestHTTP(t, fmt.Sprintf("http://%s:%d/", gw, hostPort), within(t, 10*time.Second))

	c.crictl("stop", ctrID)
	c.crictl("stopp", podID)
	if ip2 := podIP(t, c, podID); ip2 != ip {
		t.Errorf("after stopp inspectp shows IP %q, want the last known %s", ip2, ip)
	}
	leak.assertReleased(t, "after stopp") // CNI DEL at stop, as containerd does
	c.crictl("rmp", podID)
	leak.assertReleased(t, "after rmp")
	assertNoVMFiles(t, c)
}

// TestVMAndContainerReachEachOther: a container pod and a VM pod on the
// same bridge: the container fetches from the guest, the guest (told the
// container's address on its kernel command line) from the container.
func TestVMAndContainerReachEachOther(t *testing.T) {
	parallel(t)
	c, parent := startVMCrimux(t)
	c.crictl("pull", busyboxImage)
	c.crictl("pull", nginxImage)

	cpod := podJSON(t, "net-ctr", "")
	cpodID := c.crictl("runp", cpod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", cpodID) })
	web := c.crictl("create", cpodID, containerJSON(t, "web", nginxImage, nil), cpod)
	c.crictl("start", web)
	client := c.crictl("create", cpodID, containerJSON(t, "client", busyboxImage, []string{"sleep", "3600"}), cpod)
	c.crictl("start", client)
	cIP := podIP(t, c, cpodID)

	args := fmt.Sprintf(`"crimux.io/kernel-args": "console=ttyS0 quiet panic=-1 no_timer_check crimux.probe=%s:80"`, cIP)
	vpodID, vID, _ := startVMNetPod(t, c, "net-vm", parent, 0, args)
	vIP := podIP(t, c, vpodID)

	testutil.Eventually(t, within(t, 60*time.Second), "the VM reaching the container "+cIP, func() error {
		logs, _ := c.crictlErr("logs", vID)
		if strings.Contains(logs, "CRIMUX-PROBE-FAIL") {
			t.Fatalf("the guest gave up reaching %s:80:\n%s", cIP, logs)
		}
		if !strings.Contains(logs, "CRIMUX-PROBE-OK: <!DOCTYPE html>") {
			return fmt.Errorf("console so far:\n%s", logs)
		}
		return nil
	})
	testutil.Eventually(t, within(t, 30*time.Second), "the container reaching the VM "+vIP, func() error {
		// nc: the image's busybox wget crashes looking the port up.
		get := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d`, vIP, vmHTTPPort)
		out, err := c.crictlErr("exec", client, "sh", "-c", get)
		if err == nil && !strings.Contains(out, vmHTTPAnswer) {
			err = fmt.Errorf("answer %q", out)
		}
		return err
	})
}

// TestVMNetworkCycles: 20 VM pods made and removed one after another,
// each leasing its address in the guest first; afterwards no address of
// theirs is left in the host-local IPAM store, and no bridge port, tap,
// namespace (file, mount or live namespace) of theirs remains.
func TestVMNetworkCycles(t *testing.T) {
	parallel(t)
	c, parent := startVMCrimux(t)
	var snaps []*podNetSnapshot
	for i := 0; i < 20; i++ {
		podID, ctrID, start := startVMNetPod(t, c, fmt.Sprintf("vm-cycle-%d", i), parent, 0, "")
		snap := snapshotPodNet(t, c, podID)
		testutil.Eventually(t, within(t, 20*time.Second)-time.Since(start), "the guest's lease in cycle "+fmt.Sprint(i), func() error {
			if logs, _ := c.crictlErr("logs", ctrID); !strings.Contains(logs, vmNetMarker+snap.ip+"/") {
				return fmt.Errorf("console so far:\n%s", logs)
			}
			return nil
		})
		c.crictl("rmp", "-f", podID)
		snap.assertReleased(t, fmt.Sprintf("cycle %d", i))
		snaps = append(snaps, snap)
	}
	for _, s := range snaps {
		s.assertReleased(t, "after the 20 cycles")
	}
	if stray := strayBridgePorts(t); len(stray) > 0 {
		t.Errorf("bridge %s has ports whose peer is in no pod's namespace: %v", bed.bridge, stray)
	}
	assertNoVMFiles(t, c)
}

// podNetSnapshot is what a running VM pod's network is made of on the
// host, to check after its removal that none of it remains.
type podNetSnapshot struct {
	sandboxID, ip, netns, hostVeth string
	netnsIno                       uint64
	// removed is when the first assertReleased ran (after the pod's
	// removal): a process started later is in another namespace that
	// got the freed inode number (the kernel hands out the lowest free
	// one, and tests beside this one make namespaces).
	removed time.Time
}

func snapshotPodNet(t *testing.T, c *crimux, podID string) *podNetSnapshot {
	t.Helper()
	var insp struct { // crictl unwraps the verbose "info" JSON into "info"
		Info struct {
			Network struct {
				NetNS    string `json:"netns"`
				IP       string `json:"ip"`
				HostVeth string `json:"hostVeth"`
			} `json:"network"`
		} `json:"info"`
	}
	mustJSON(t, c.crictl("inspectp", "-o", "json", podID), &insp)
	n := insp.Info.Network
	s := &podNetSnapshot{sandboxID: strings.TrimPrefix(podID, "vm--"), ip: n.IP, netns: n.NetNS, hostVeth: n.HostVeth}
	if s.ip == "" || s.netns == "" || s.hostVeth == "" {
		t.Fatalf("inspectp of %s shows no network: %+v", podID, n)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(s.netns, &st); err != nil {
		t.Fatalf("pod namespace %s: %v", s.netns, err)
	}
	s.netnsIno = st.Ino
	if owner, err := os.ReadFile(filepath.Join(bed.ipamDir, s.ip)); err != nil || !strings.Contains(string(owner), s.sandboxID) {
		t.Fatalf("host-local lease of %s: %q, %v; want one naming %s", s.ip, owner, err, s.sandboxID)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", s.hostVeth, "brport")); err != nil {
		t.Fatalf("host veth %s is no bridge port: %v", s.hostVeth, err)
	}
	return s
}

// assertReleased: the pod's address, veth, namespace file and namespace
// are gone (no process is in it, no mount namespace holds it).
func (s *podNetSnapshot) assertReleased(t *testing.T, when string) {
	t.Helper()
	var left []string
	if b, err := os.ReadFile(filepath.Join(bed.ipamDir, s.ip)); err == nil && strings.Contains(string(b), s.sandboxID) {
		left = append(left, "IPAM lease "+s.ip)
	}
	entries, _ := os.ReadDir(bed.ipamDir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(bed.ipamDir, e.Name())); err == nil && strings.Contains(string(b), s.sandboxID) {
			left = append(left, "IPAM entry "+e.Name())
		}
	}
	if _, err := os.Lstat(filepath.Join("/sys/class/net", s.hostVeth)); err == nil {
		left = append(left, "host veth "+s.hostVeth)
	}
	if _, err := os.Lstat(s.netns); err == nil {
		left = append(left, "netns file "+s.netns)
	}
	if s.removed.IsZero() {
		s.removed = time.Now()
	}
	left = append(left, netnsHolders(s.netnsIno, s.netns, s.removed)...)
	if len(left) > 0 {
		t.Fatalf("%s: pod %s left %v", when, s.sandboxID, left)
	}
}

// netnsHolders lists the processes in a namespace (by inode) that started
// before removed, and the mount namespaces that still mount its file.
func netnsHolders(ino uint64, path string, removed time.Time) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	want := fmt.Sprintf("net:[%d]", ino)
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns/net")); err == nil && l == want && procStarted(p.Name()).Before(removed) {
			out = append(out, "process "+p.Name()+" in the namespace")
		}
		if b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "mountinfo")); err == nil && strings.Contains(string(b), " "+path+" ") {
			out = append(out, "a mount of it seen by process "+p.Name())
		}
	}
	return out
}

// strayBridgePorts lists the bed bridge's ports whose veth peer is not in
// another namespace: a pod's port lives as long as its namespace, so such
// a port was left by a half-made or half-removed pod. Ports of live pods
// (other tests run beside this one) have their peer in the pod's
// namespace and are not counted.
func strayBridgePorts(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-d", "link", "show", "master", bed.bridge).Output()
	if err != nil {
		t.Fatalf("ip link show master %s: %v", bed.bridge, err)
	}
	var links []struct {
		Name     string `json:"ifname"`
		NetNSID  *int   `json:"link_netnsid"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
	}
	mustJSON(t, string(out), &links)
	var stray []string
	for _, l := range links {
		if l.LinkInfo.Kind == "veth" && l.NetNSID == nil {
			stray = append(stray, l.Name)
		}
	}
	return stray
}

// TestVMNetworkDelRetried: a CNI DEL that fails (the bridge plugin gone)
// fails stopp, is recorded, and is retried — here by the start-up
// collector of a restarted crimux — until the address is back in the pool
// and the namespace is gone.
func TestVMNetworkDelRetried(t *testing.T) {
	parallel(t)
	requireVM(t)
	bin := linkedCNIBinDir(t)
	cfg := writeJSON(t, "crimux.toml", fmt.Sprintf("[libvirt]\ncni_bin_dirs = [%q]\n", bin))
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", cfg)
	podID := c.crictl("runp", "--runtime", "vm", vmNetPodJSON(t, "vm-del-retry", "/crimux-e2e/del-retry", 0))
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	snap := snapshotPodNet(t, c, podID)

	if err := os.Remove(filepath.Join(bin, "bridge")); err != nil {
		t.Fatal(err)
	}
	out, err := c.crictlErr("stopp", podID)
	if err == nil || !strings.Contains(out, "Unavailable") || !strings.Contains(out, "CNI DEL") {
		t.Fatalf("stopp with the bridge plugin gone: %v, %s; want Unavailable naming CNI DEL", err, out)
	}
	t.Logf("stopp with the bridge plugin gone: %s", strings.TrimSpace(out))
	c.crictl("rmp", podID) // gone for CRI; the network is still owed
	if out := c.crictl("pods", "-q"); strings.Contains(out, podID) {
		t.Fatalf("removed pod still listed:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(bed.ipamDir, snap.ip)); err != nil || !strings.Contains(string(b), snap.sandboxID) {
		t.Fatalf("the lease of %s went although DEL failed (%q, %v): the test proves nothing", snap.ip, b, err)
	}

	if err := os.Symlink(filepath.Join(bed.cniBinDir, "bridge"), filepath.Join(bin, "bridge")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.restart()
	testutil.Eventually(t, within(t, 20*time.Second), "the failed DEL retried", func() error {
		if _, err := os.Lstat(snap.netns); err == nil {
			return fmt.Errorf("netns %s still there", snap.netns)
		}
		if b, err := os.ReadFile(filepath.Join(bed.ipamDir, snap.ip)); err == nil && strings.Contains(string(b), snap.sandboxID) {
			return fmt.Errorf("lease of %s still held", snap.ip)
		}
		return nil
	})
	snap.assertReleased(t, "after the retry")
	t.Logf("released %.1f s after the restart", time.Since(start).Seconds())
}

// linkedCNIBinDir is a CNI bin dir of the test's own with a link to each
// of the bed's plugins: the test can take one away or put another in.
func linkedCNIBinDir(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	plugins, _ := filepath.Glob(filepath.Join(bed.cniBinDir, "*"))
	for _, p := range plugins {
		if err := os.Symlink(p, filepath.Join(bin, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// procStarted is when process pid started (its stat's starttime, in clock
// ticks of 1/100 s since boot); the zero time when it cannot be read (the
// process is gone).
func procStarted(pid string) time.Time {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return time.Time{}
	}
	// After the command's ")": state is field 3, starttime field 22.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	procStat, err := os.ReadFile("/proc/stat")
	if err != nil || len(fields) < 20 {
		return time.Time{}
	}
	var btime int64
	for _, l := range strings.Split(string(procStat), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			btime, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	ticks, _ := strconv.ParseInt(fields[19], 10, 64)
	return time.Unix(btime, 0).Add(time.Duration(ticks) * 10 * time.Millisecond)
}
