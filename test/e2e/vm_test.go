package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The VM test image (test/images, served by the bed's registry): a Debian
// cloud kernel, a busybox initramfs whose /init prints vmMarker on the
// serial console, and a small qcow2 disk.
const (
	vmImage  = "127.0.0.1:5117/crimux/vm-busybox:latest"
	vmMarker = "CRIMUX-VM-BOOTED"
	vmMemory = 256 << 20
	// One CPU: qemu emulates the guest's CPU in software (TCG), so a
	// quota of half a CPU stretches the boot to ~8 s, too close to the
	// 10 s the console marker is given on a loaded 2-core CI machine.
	vmCPUQuota = 100000
	vmOverhead = 256 << 20 // config default memory_overhead_mib
)

// requireVM skips unless e2e runs are on; it fails if libvirtd or the qemu
// wrapper of the bed is missing.
func requireVM(t *testing.T) {
	t.Helper()
	requireBed(t)
	if out, err := exec.Command("virsh", "-c", "qemu:///system", "version").CombinedOutput(); err != nil {
		t.Fatalf("libvirtd does not answer (run test/bed/libvirt-up.sh): %v\n%s", err, out)
	}
}

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// domainOf is the libvirt domain of a VM container ID as crictl shows it.
func domainOf(ctrID string) string {
	return "crimux-" + strings.TrimPrefix(ctrID, "vm--")
}

func vmPodJSON(t *testing.T, name, cgroupParent, annotations string) string {
	return writeJSON(t, "vmpod.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "crimux-e2e", "uid": %q, "attempt": 0},
  "log_directory": %q,
  "annotations": {%s},
  "linux": {"cgroup_parent": %q}
}`, name, podUID(name), t.TempDir(), annotations, cgroupParent))
}

func vmContainerJSON(t *testing.T, image string, memory int64, annotations string) string {
	return writeJSON(t, "vmctr.json", fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "annotations": {%s},
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d}}
}`, image, annotations, vmCPUQuota, memory))
}

// TestVMPodLifecycle: a VM pod through crimux with crictl against real
// containerd, libvirtd and qemu (TCG): it runs in virsh, every qemu thread
// is in the pod's cgroup with the container's limits, the console reaches
// crictl logs, stats show CPU, and stop/rm/rmp leave nothing behind.
// Not parallel: it holds the busybox guest to its 10 s boot.
func TestVMPodLifecycle(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-lifecycle", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	if !strings.HasPrefix(podID, "vm--") {
		t.Fatalf("VM pod ID %q lacks the vm-- prefix", podID)
	}
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	start := time.Now()
	c.crictl("start", ctrID)
	domain := domainOf(ctrID)

	if out := virsh(t, "list", "--name"); !strings.Contains(out, domain) {
		t.Fatalf("domain %s not running in virsh list:\n%s", domain, out)
	}
	pid := qemuPID(t, domain)
	checkThreadsUnder(t, pid, parent)
	checkLimits(t, parent+"/"+domain)
	checkNoUSB(t, pid)

	testutil.Eventually(t, 10*time.Second-time.Since(start), "console marker in crictl logs", func() error {
		if out, _ := c.crictlErr("logs", ctrID); !strings.Contains(out, vmMarker) {
			return fmt.Errorf("logs so far: %q", out)
		}
		return nil
	})
	t.Logf("console marker in crictl logs %v after crictl start", time.Since(start).Round(time.Millisecond))
	testutil.Eventually(t, within(t, 10*time.Second), "non-zero CPU in crictl stats", func() error {
		if st := c.stats(t, ctrID); len(st) != 1 || st[0].CPUNanos == 0 {
			return fmt.Errorf("stats: %+v", st)
		}
		return nil
	})
	var insp struct {
		Status struct{ State string } `json:"status"`
		Info   struct {
			Domain string `json:"domain"`
			Accel  string `json:"accel"`
		} `json:"info"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &insp)
	if insp.Status.State != "CONTAINER_RUNNING" || insp.Info.Domain != domain || insp.Info.Accel != "tcg" {
		t.Fatalf("inspect: %+v, want running, domain %s, accel tcg", insp, domain)
	}

	// Exec goes through the QEMU guest agent: a guest without one (this
	// busybox guest) is refused within seconds, naming the agent, not hung.
	execStart := time.Now()
	if out, err := c.crictlErr("exec", "--sync", "--timeout", "10", ctrID, "true"); err == nil ||
		!strings.Contains(out, "guest agent") || time.Since(execStart) > 15*time.Second {
		t.Fatalf("exec in a guest without an agent: %v after %v: %s; want a refusal naming the guest agent", err, time.Since(execStart), out)
	}

	// UpdateContainerResources reaches the VM's cgroup.
	c.crictl("update", "--cpu-period", "100000", "--cpu-quota", "30000", "--memory", strconv.Itoa(vmMemory), ctrID)
	quota, _ := filepath.Glob("/sys/fs/cgroup/cpu*" + parent + "/" + domain + "/cpu.cfs_quota_us")
	if len(quota) == 0 {
		quota = []string{"/sys/fs/cgroup" + parent + "/" + domain + "/cpu.max"}
	}
	if b, err := os.ReadFile(quota[0]); err != nil || strings.Fields(string(b))[0] != "30000" {
		t.Fatalf("after crictl update, %s is %q (%v), want 30000", quota[0], b, err)
	}

	c.crictl("stop", ctrID)
	c.crictl("rm", ctrID)
	c.crictl("stopp", podID)
	c.crictl("rmp", podID)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("domain %s still defined after rm:\n%s", domain, out)
	}
	assertNoVMFiles(t, c)
	for _, dir := range cgroupDirs(parent + "/" + domain) {
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("cgroup %s still exists after rm", dir)
		}
	}
}

// TestContainerAndVMSideBySide: one socket lists a container pod and a VM
// pod, each with its right state.
func TestContainerAndVMSideBySide(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", busyboxImage)
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)

	cpod := podJSON(t, "side-ctr", "")
	cpodID := c.crictl("runp", cpod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", cpodID) })
	cID := c.crictl("create", cpodID, containerJSON(t, "sleeper", busyboxImage, []string{"sleep", "3600"}), cpod)
	c.crictl("start", cID)

	vpod := vmPodJSON(t, "side-vm", parent, "")
	vpodID := c.crictl("runp", "--runtime", "vm", vpod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", vpodID) })
	vID := c.crictl("create", vpodID, vmContainerJSON(t, vmImage, vmMemory, ""), vpod)

	ps := c.crictl("ps", "-a", "-o", "json")
	states := map[string]string{}
	var list struct {
		Containers []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"containers"`
	}
	mustJSON(t, ps, &list)
	for _, x := range list.Containers {
		states[x.ID] = x.State
	}
	if states[cID] != "CONTAINER_RUNNING" || states[vID] != "CONTAINER_CREATED" {
		t.Fatalf("crictl ps states: %v; want %s running and %s created", states, cID, vID)
	}
	c.crictl("start", vID)
	pods := c.crictl("pods", "-q", "--state", "ready")
	if !strings.Contains(pods, cpodID) || !strings.Contains(pods, vpodID) {
		t.Fatalf("crictl pods lists neither or one of %s, %s:\n%s", cpodID, vpodID, pods)
	}
	if out := c.crictl("ps", "-q", "--state", "running"); !strings.Contains(out, cID) || !strings.Contains(out, vID) {
		t.Fatalf("crictl ps does not list both running:\n%s", out)
	}
	c.crictl("rmp", "-f", vpodID)
	c.crictl("rmp", "-f", cpodID)
	assertNoVMFiles(t, c)
}

// qemuPID reads the pid libvirt records for a running domain.
func qemuPID(t *testing.T, domain string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", domain+".pid"))
	if err != nil {
		t.Fatalf("qemu pid of %s: %v", domain, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkNoUSB asserts that qemu emulates no USB device: libvirt gives an
// i440fx domain a UHCI controller unless told otherwise, and a guest
// reaches whatever qemu emulates.
func checkNoUSB(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-usb" || args[i] == "-device" && strings.Contains(args[i+1], "usb") {
			t.Fatalf("qemu emulates USB: %s %s", args[i], args[i+1])
		}
	}
}

// checkThreadsUnder asserts that every line of every thread's cgroup file
// (every hierarchy, the unified one included) is under parent.
func checkThreadsUnder(t *testing.T, pid int, parent string) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/cgroup", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of qemu %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || parts[1] == "name=systemd" && parts[2] == "/" {
				continue
			}
			if parts[1] == "" && parts[0] == "0" && !unifiedMounted() {
				continue
			}
			if !strings.HasPrefix(parts[2], parent+"/") {
				t.Fatalf("%s: %q is not under the pod's cgroup %s", f, line, parent)
			}
		}
	}
	t.Logf("all %d qemu threads are under %s", len(tasks), parent)
}

func unifiedMounted() bool {
	_, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers")
	_, err2 := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil || err2 == nil
}

// checkLimits asserts the VM cgroup's memory limit and CPU quota.
func checkLimits(t *testing.T, path string) {
	t.Helper()
	wantMem := int64(vmMemory + vmOverhead)
	if b, err := os.ReadFile("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes"); err == nil {
		if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != wantMem {
			t.Fatalf("memory.limit_in_bytes of %s is %d, want %d", path, got, wantMem)
		}
	} else if b, err := os.ReadFile("/sys/fs/cgroup" + path + "/memory.max"); err == nil {
		if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != wantMem {
			t.Fatalf("memory.max of %s is %d, want %d", path, got, wantMem)
		}
	} else {
		t.Fatalf("no memory limit file for %s", path)
	}
	quotaFiles, _ := filepath.Glob("/sys/fs/cgroup/cpu*" + path + "/cpu.cfs_quota_us")
	if len(quotaFiles) > 0 {
		b, _ := os.ReadFile(quotaFiles[0])
		if got := strings.TrimSpace(string(b)); got != strconv.Itoa(vmCPUQuota) {
			t.Fatalf("%s is %s, want %d", quotaFiles[0], got, vmCPUQuota)
		}
	} else if b, err := os.ReadFile("/sys/fs/cgroup" + path + "/cpu.max"); err == nil {
		if got := strings.Fields(string(b)); len(got) == 0 || got[0] != strconv.Itoa(vmCPUQuota) {
			t.Fatalf("cpu.max of %s is %q, want quota %d", path, b, vmCPUQuota)
		}
	} else {
		t.Fatalf("no CPU quota file for %s", path)
	}
}

// cgroupDirs lists path in every mounted cgroup hierarchy.
func cgroupDirs(path string) []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	var out []string
	for _, r := range roots {
		if fi, err := os.Stat(r); err == nil && fi.IsDir() {
			out = append(out, r+path)
		}
	}
	return append(out, "/sys/fs/cgroup"+path)
}

// testCgroupParent names a fresh pod cgroup parent under /crimux-e2e,
// removed again when the test ends.
func testCgroupParent(t *testing.T) string {
	parent := fmt.Sprintf("/crimux-e2e/pod%d", time.Now().UnixNano())
	t.Cleanup(func() { removeCgroupTree(parent) })
	return parent
}

// removeCgroupTree removes a test's pod cgroup parent (deepest first).
func removeCgroupTree(path string) {
	for _, d := range cgroupDirs(path) {
		_ = filepath.Walk(d, func(string, os.FileInfo, error) error { return nil })
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() {
				_ = os.Remove(filepath.Join(d, e.Name()))
			}
		}
		_ = os.Remove(d)
		_ = os.Remove(filepath.Dir(d)) // the test's /crimux-e2e, if empty
	}
}

// assertNoVMFiles asserts crimux's state dir holds no VM directory.
func assertNoVMFiles(t *testing.T, c *crimux) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(c.stateDir, "vms"))
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("VM files left behind in %s: %v", c.stateDir, names)
	}
}

// TestAccelAutoRunsAGuest: with accel "auto", the default, crimux uses KVM
// only once a KVM guest has booted (the host's kernel to its root mount),
// so a VM pod's guest runs wherever crimux chose KVM. On a host whose
// /dev/kvm starts guests that never run (this machine kind: nested, the
// guest hangs in its kernel's first instructions), crimux chooses TCG and
// says why in one warning. A probe that only started qemu stopped would
// choose KVM here, and the guest would hang for minutes while its
// container said Running.
func TestAccelAutoRunsAGuest(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd) // no --vm-accel: auto
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-accel-auto", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	start := time.Now()
	c.crictl("start", ctrID)
	var insp struct {
		Info struct {
			Accel string `json:"accel"`
		} `json:"info"`
	}
	mustJSON(t, c.crictl("inspect", "-o", "json", ctrID), &insp)
	testutil.Eventually(t, within(t, 30*time.Second), "the guest's console marker", func() error {
		if out, _ := c.crictlErr("logs", ctrID); !strings.Contains(out, vmMarker) {
			return fmt.Errorf("no marker yet with accel %s", insp.Info.Accel)
		}
		return nil
	})
	t.Logf("accel %s: the guest booted %v after start", insp.Info.Accel, time.Since(start).Round(time.Millisecond))
	warned := strings.Contains(c.logs.String(), "exists but qemu cannot run a VM with KVM here")
	if _, err := os.Stat("/dev/kvm"); err == nil && insp.Info.Accel == "tcg" && !warned {
		t.Fatalf("/dev/kvm exists, TCG was chosen, and no warning said why:\n%s", tail(c.logs.String(), 20))
	}
	if insp.Info.Accel == "kvm" && warned {
		t.Fatal("KVM chosen after a warning that it cannot run")
	}
}
