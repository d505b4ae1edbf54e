package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// podsAndContainers is what kubelet sees: every pod and container with its
// state, as crictl lists them; with names, only the pods of those names
// and their containers.
func podsAndContainers(t *testing.T, c *crimux, names ...string) (pods, ctrs map[string]string) {
	t.Helper()
	var pl struct {
		Items []struct {
			ID, State string
			Metadata  struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	mustJSON(t, c.crictl("pods", "-o", "json"), &pl)
	var cl struct {
		Containers []struct {
			ID, State    string
			PodSandboxID string `json:"podSandboxId"`
		} `json:"containers"`
	}
	mustJSON(t, c.crictl("ps", "-a", "-o", "json"), &cl)
	pods, ctrs = map[string]string{}, map[string]string{}
	for _, p := range pl.Items {
		if len(names) == 0 || slices.Contains(names, p.Metadata.Name) {
			pods[p.ID] = p.State
		}
	}
	for _, x := range cl.Containers {
		if _, ours := pods[x.PodSandboxID]; len(names) == 0 || ours {
			ctrs[x.ID] = x.State
		}
	}
	return pods, ctrs
}

// runVM starts a VM pod and returns its pod and container IDs.
func runVM(t *testing.T, c *crimux, name, parent string) (string, string) {
	t.Helper()
	pod := vmPodJSON(t, name, parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	c.crictl("start", ctrID)
	return podID, ctrID
}

// runSleeper starts a busybox pod and returns its pod and container IDs.
func runSleeper(t *testing.T, c *crimux, name string) (string, string) {
	t.Helper()
	pod := podJSON(t, name, "")
	podID := c.crictl("runp", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, containerJSON(t, "sleeper", busyboxImage, []string{"sleep", "3600"}), pod)
	c.crictl("start", ctrID)
	return podID, ctrID
}

// TestRestartKeepsEverything: crimux SIGKILLed and restarted with a VM and
// a container running: the same qemu process runs on, and crictl shows
// the same IDs in the same states.
func TestRestartKeepsEverything(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", busyboxImage)
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	_, vmID := runVM(t, c, "restart-vm", parent)
	runSleeper(t, c, "restart-ctr")
	pid := qemuPID(t, domainOf(vmID))
	// Only this test's pods: the bed's containerd holds other tests' too.
	pods, ctrs := podsAndContainers(t, c, "restart-vm", "restart-ctr")

	for i := 0; i < 3; i++ {
		c.restart()
		if got := qemuPID(t, domainOf(vmID)); got != pid {
			t.Fatalf("restart %d: qemu pid %d, was %d: the VM was recreated", i, got, pid)
		}
		p2, c2 := podsAndContainers(t, c, "restart-vm", "restart-ctr")
		if fmt.Sprint(p2) != fmt.Sprint(pods) || fmt.Sprint(c2) != fmt.Sprint(ctrs) {
			t.Fatalf("restart %d changed what kubelet sees:\npods %v -> %v\ncontainers %v -> %v", i, pods, p2, ctrs, c2)
		}
	}
	t.Logf("3 SIGKILL restarts: qemu pid %d unchanged; pods %v; containers %v", pid, pods, ctrs)
}

// libvirtdPID returns the pid of the running libvirtd.
func libvirtdPID(t *testing.T) int {
	t.Helper()
	pids := libvirtdRunning()
	if pids == "" {
		t.Fatal("libvirtd is not running")
	}
	pid, _ := strconv.Atoi(strings.Fields(pids)[0])
	return pid
}

// TestLibvirtdRestart: with libvirtd gone, the node stays ready, the VM
// runtime condition is false with a reason, VM pods stay listed and new
// VM pods get Unavailable; the VM keeps running, and crimux serves VM
// work again within 5 s of libvirtd's return.
func TestLibvirtdRestart(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	vmPod, vmID := runVM(t, c, "libvirtd-restart", parent)
	pid := qemuPID(t, domainOf(vmID))

	lpid := libvirtdPID(t)
	if err := syscall.Kill(lpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { startLibvirtd(t) })
	testutil.Eventually(t, within(t, 10*time.Second), "VM runtime condition false", func() error {
		cond := runtimeCondition(t, c, "VMRuntimeReady")
		if cond.Status || cond.Reason == "" {
			return fmt.Errorf("VMRuntimeReady %+v", cond)
		}
		return nil
	})
	if cond := runtimeCondition(t, c, "RuntimeReady"); !cond.Status {
		t.Fatalf("node runtime not ready while only libvirtd is down: %+v", cond)
	}
	if pods, _ := podsAndContainers(t, c); pods[vmPod] != "SANDBOX_READY" {
		t.Fatalf("VM pod %s not listed ready while libvirtd is down: %v", vmPod, pods)
	}
	out, err := c.crictlErr("runp", "--runtime", "vm", vmPodJSON(t, "while-down", parent, ""))
	if err == nil || !strings.Contains(out, "Unavailable") {
		t.Fatalf("new VM pod while libvirtd is down: err %v, output %q; want Unavailable", err, out)
	}

	startLibvirtd(t)
	back := time.Now()
	testutil.Eventually(t, within(t, 5*time.Second), "VM work served again", func() error {
		if cond := runtimeCondition(t, c, "VMRuntimeReady"); !cond.Status {
			return fmt.Errorf("VMRuntimeReady %+v", cond)
		}
		return nil
	})
	podID, err := c.crictlErr("runp", "--runtime", "vm", vmPodJSON(t, "after-restart", parent, ""))
	if err != nil {
		t.Fatalf("new VM pod after libvirtd came back: %v: %s", err, podID)
	}
	c.crictl("rmp", "-f", podID)
	t.Logf("VM work served %s after libvirtd restarted", time.Since(back).Round(time.Millisecond))
	if got := qemuPID(t, domainOf(vmID)); got != pid {
		t.Fatalf("qemu pid %d after the libvirtd restart, was %d", got, pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("qemu %d died with libvirtd", pid)
	}
}

func startLibvirtd(t *testing.T) {
	t.Helper()
	if libvirtdRunning() != "" {
		return
	}
	// Through the bed's script, which records the daemon it starts, so
	// libvirt-down.sh stops it again.
	up := exec.Command(filepath.Join(repoRoot(), "test/bed/libvirt-up.sh"))
	up.Env = append(os.Environ(), "TESTBED="+bed.testbed)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("start libvirtd: %v\n%s", err, out)
	}
}

type condition struct {
	Type, Reason, Message string
	Status                bool
}

func runtimeCondition(t *testing.T, c *crimux, typ string) condition {
	t.Helper()
	var info struct {
		Status struct {
			Conditions []condition `json:"conditions"`
		} `json:"status"`
	}
	mustJSON(t, c.crictl("info", "-o", "json"), &info)
	for _, cond := range info.Status.Conditions {
		if cond.Type == typ {
			return cond
		}
	}
	t.Fatalf("no %s condition in crictl info", typ)
	return condition{}
}

// TestContainerdRestart: containerd killed and restarted; the container
// keeps running and crimux serves container work again within 5 s.
func TestContainerdRestart(t *testing.T) {
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	c.crictl("pull", busyboxImage)
	_, ctrID := runSleeper(t, c, "containerd-restart")
	b, err := os.ReadFile(filepath.Join(bed.runDir, bedInstance("containerd")+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	cpid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(cpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	up := exec.Command(filepath.Join(repoRoot(), "test/bed/up.sh"))
	up.Env = append(os.Environ(), "TESTBED="+bed.testbed)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("restart containerd: %v\n%s", err, out)
	}
	back := time.Now()
	testutil.Eventually(t, within(t, 5*time.Second), "container served again through crimux", func() error {
		out, err := c.crictlErr("inspect", "-o", "json", ctrID)
		if err != nil || !strings.Contains(out, "CONTAINER_RUNNING") {
			return fmt.Errorf("inspect: %v %.200s", err, out)
		}
		return nil
	})
	t.Logf("container work served %s after containerd restarted", time.Since(back).Round(time.Millisecond))
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// TestWipedStateDirAdoptsOwnVMs: crimux killed, its state dir wiped, and
// started again on the same node: it recognises its running VM by the
// identity stamped in the domain, lists it, and removing the pod removes
// the domain — nothing is left running forever.
func TestWipedStateDirAdoptsOwnVMs(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	vmPod, vmID := runVM(t, c, "wiped", parent)
	domain := domainOf(vmID)
	c.kill()
	if err := os.RemoveAll(c.stateDir); err != nil {
		t.Fatal(err)
	}
	c.start()
	testutil.Eventually(t, within(t, 15*time.Second), "adopted VM listed", func() error {
		pods, ctrs := podsAndContainers(t, c)
		if pods[vmPod] == "" || ctrs[vmID] != "CONTAINER_RUNNING" {
			return fmt.Errorf("pods %v containers %v", pods, ctrs)
		}
		return nil
	})
	c.crictl("stopp", vmPod)
	c.crictl("rmp", vmPod)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("adopted domain %s still defined after rmp:\n%s", domain, out)
	}
}
