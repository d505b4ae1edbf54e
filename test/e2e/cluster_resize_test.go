package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// resizePatch is kubectl patch's body for the VM pod's container: CPU and
// memory, requests equal to limits (the pod stays Guaranteed).
func resizePatch(cpu, memory string) string {
	return fmt.Sprintf(`{"spec":{"containers":[{"name":"vm","resources":{"requests":{"cpu":%q,"memory":%q},"limits":{"cpu":%q,"memory":%q}}}]}}`,
		cpu, memory, cpu, memory)
}

// checkResize: kubectl patch pod --subresource resize of a running VM,
// 1 to 2 CPUs and +256 MiB: the guest sees 2 CPUs and the memory, the pod's
// cgroup and the VM API follow, the pod's resize completes; back to 1 CPU
// and -128 MiB likewise; more memory than the VM can grow to is refused
// and kubelet says why on the pod. The pod keeps its container all along.
// It returns the guest's memory total.
func checkResize(t *testing.T, c *daemonRun, v vmPodRef) (memMiB int) {
	t.Helper()
	before := guestMemTotal(t, v)
	resize(t, v, "2", "1280Mi")
	requireGuestCPUs(t, v, "2")
	grownMiB := guestMemTotal(t, v)
	if grownMiB < before+200 {
		t.Fatalf("free -m in the guest: %d MiB total after +256 MiB, %d before", grownMiB, before)
	}
	requirePodCgroup(t, v, 200000, (1280+256)<<20)
	requireVMSize(t, c, v, 2, 1280)

	// Back to 1 CPU and 128 MiB less: the guest unplugs a CPU's worth and
	// the memory. kubelet lowers a memory limit only below the
	// container's usage, which crimux reports as the guest's own: qemu's
	// cgroup is first made to hold more than the new limit (the guest's
	// page cache), as a guest that has run a while does.
	used := fillGuestMemory(t, v, (1152+32)<<20)
	resize(t, v, "1", "1152Mi")
	requireGuestMemoryUsage(t, c, v, used)
	requireGuestCPUs(t, v, "1")
	shrunkMiB := guestMemTotal(t, v)
	if shrunkMiB > grownMiB-100 {
		t.Fatalf("free -m in the guest: %d MiB total after -128 MiB, %d before", shrunkMiB, grownMiB)
	}
	requirePodCgroup(t, v, 100000, (1152+256)<<20)
	requireVMSize(t, c, v, 1, 1152)

	// Above what the VM can grow to (twice its boot RAM): crimux refuses,
	// kubelet reports crimux's reason on the pod, nothing changes.
	kubectl(t, v.k8s, "-n", clusterNamespace, "patch", "pod", v.name, "--subresource", "resize", "--patch", resizePatch("1", "3Gi"))
	testutil.Eventually(t, 2*time.Minute, "the refused resize reported on the pod", func() error {
		p, err := getPod(v.k8s, v.name)
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == "PodResizeInProgress" && strings.Contains(cond.Message, "can grow to") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
	requireVMSize(t, c, v, 1, 1152)
	resize(t, v, "1", "1152Mi") // back to what the VM has: the resize completes
	p, err := getPod(v.k8s, v.name)
	if err != nil {
		t.Fatal(err)
	}
	v.requireSameContainer(t, p, "after the resizes")
	return shrunkMiB
}

// resize patches the VM pod's resources and waits until kubelet reports
// the resize done: no resize condition left, the container's resources
// the new ones.
func resize(t *testing.T, v vmPodRef, cpu, memory string) {
	t.Helper()
	start := time.Now()
	kubectl(t, v.k8s, "-n", clusterNamespace, "patch", "pod", v.name, "--subresource", "resize", "--patch", resizePatch(cpu, memory))
	testutil.Eventually(t, 3*time.Minute, "the resize to "+cpu+" CPU, "+memory+" done", func() error {
		p, err := getPod(v.k8s, v.name)
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if strings.HasPrefix(cond.Type, "PodResize") {
				return fmt.Errorf("condition %s %s: %s %s", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("%d container statuses", len(p.Status.ContainerStatuses))
		}
		if l := p.Status.ContainerStatuses[0].Resources.Limits; l["cpu"] != cpu || l["memory"] != memory {
			return fmt.Errorf("container resources %v", l)
		}
		return nil
	})
	t.Logf("kubectl patch --subresource resize to %s CPU, %s: done after %v", cpu, memory, time.Since(start).Round(time.Second))
}

// guestMemTotal is free -m's total in the guest.
func guestMemTotal(t *testing.T, v vmPodRef) int {
	t.Helper()
	out := guestRead(t, v, "free -m")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Mem:" {
			n, err := strconv.Atoi(f[1])
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("free -m in the guest: %q", out)
	return 0
}

// requirePodCgroup: the pod's cgroup (kubelet's) has the CPU quota and
// memory limit of the resized pod (the RuntimeClass overhead included).
func requirePodCgroup(t *testing.T, v vmPodRef, quota, memory int64) {
	t.Helper()
	pod := filepath.Join(kubeletCgroup, "kubepods", "pod"+v.uid)
	for file, want := range map[string]int64{
		filepath.Join("/sys/fs/cgroup/cpu", pod, "cpu.cfs_quota_us"):         quota,
		filepath.Join("/sys/fs/cgroup/memory", pod, "memory.limit_in_bytes"): memory,
	} {
		testutil.Eventually(t, 30*time.Second, file, func() error {
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(want, 10) {
				return fmt.Errorf("%s, want %d", got, want)
			}
			return nil
		})
	}
}

// requireVMSize: crimuxctl vm get shows the VM's size.
func requireVMSize(t *testing.T, c *daemonRun, v vmPodRef, vcpus, memoryMiB int) {
	t.Helper()
	var resp struct {
		VM vmJSON `json:"vm"`
	}
	mustJSON(t, c.ctlOK(t, ctlBin(t), "-o", "json", "vm", "get", v.ctrID), &resp)
	if r := resp.VM.Resources; r.Vcpus != vcpus || r.MemoryMib != strconv.Itoa(memoryMiB) {
		t.Fatalf("crimuxctl vm get: %d vCPUs, %s MiB; want %d and %d", r.Vcpus, r.MemoryMib, vcpus, memoryMiB)
	}
}

// requireGuestCPUs: nproc in the guest (kubectl exec) prints n once the
// resize is done (crimux onlines plugged vCPUs before it answers; a few
// seconds of slack for the guest's own bookkeeping).
// requireSizeAfterReboot: a guest resized to 1 CPU (its second vCPU left
// plugged under TCG) and +128 MiB has that size again after its reboots
// (crimux brings it back through the guest agent).
func requireSizeAfterReboot(t *testing.T, v vmPodRef, memMiB int) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "the resized size after the reboot", func() error {
		cpus := strings.TrimSpace(guestRead(t, v, "nproc"))
		mem := guestMemTotal(t, v)
		if cpus != "1" || mem < memMiB-16 {
			return fmt.Errorf("nproc %s, free -m total %d MiB; want 1 and %d", cpus, mem, memMiB)
		}
		return nil
	})
}

func requireGuestCPUs(t *testing.T, v vmPodRef, n string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "nproc "+n+" in the guest", func() error {
		if got := strings.TrimSpace(guestRead(t, v, "nproc")); got != n {
			return fmt.Errorf("nproc = %s", got)
		}
		return nil
	})
}
