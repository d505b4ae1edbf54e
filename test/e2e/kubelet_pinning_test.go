package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// pinnedVMManifest is a Guaranteed VM pod (CPU and memory limits equal to
// their requests, a whole CPU) whose RAM is 256 MiB of 2 MiB huge pages:
// kubelet's static CPU manager gives it a CPU of its own, and its
// hugepages-2Mi limit reaches crimux as the container's hugepage_limits.
// The memory limit is qemu's own (memory_overhead_mib, 256 MiB).
var pinnedVMManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kl-vm-pinned
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
        cpu: "1"
        memory: 320Mi
        hugepages-2Mi: 256Mi
`

// hugePages2M is the node's pool of 2 MiB pages.
const hugePages2M = "/sys/kernel/mm/hugepages/hugepages-2048kB"

// TestKubeletPinnedHugePageVM runs kubelet with its static CPU manager
// policy (CPU 0 reserved) on a node with 2 MiB huge pages, and a
// Guaranteed VM pod asking for one CPU and 256 MiB of huge pages: every
// vCPU thread of its qemu may run exactly on the CPU kubelet assigned it
// (its cpu_manager_state), and the guest's RAM is taken from the node's
// huge pages (HugePages_Free drops by 128 while it runs, and is back once
// the pod is gone).
func TestKubeletPinnedHugePageVM(t *testing.T) {
	bin := os.Getenv("CRIMUX_KUBELET")
	if bin == "" {
		t.Skip("CRIMUX_KUBELET is not set (make e2e-kubelet builds kubelet and sets it)")
	}
	requireVM(t)
	if !strings.Contains(readFile(t, "/proc/self/mounts"), " hugetlbfs ") {
		t.Fatal("no hugetlbfs mounted (test/bed/libvirt-up.sh mounts one before libvirtd starts)")
	}
	reserveHugePages(t, 128)
	wrapper := installKubeletWrapper(t)
	prepareKubeletCgroups(t)
	c := startDaemon(t, fmt.Sprintf("[libvirt]\nemulator = %q\nplacement_socket = %q\n", wrapper, kubeletPlacementSocket),
		nil, "--vm-accel", "tcg")
	t.Cleanup(func() { removeKubeletPods(c) })
	k := startKubeletWith(t, bin, kubeletSetup{
		config: func(k *kubeletRun) string {
			return fmt.Sprintf(kubeletConfig, c.endpoint, kubeletCgroup, k.manifests, k.port,
				filepath.Join(k.dir, "logs"), filepath.Join(k.dir, "volume-plugins")) +
				"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
		},
		ready: func(k *kubeletRun) error { _, err := k.pods(); return err },
	})
	freeBefore := hugePagesFree(t)
	k.writeManifest("vm-pinned.yaml", pinnedVMManifest)
	name := "kl-vm-pinned-" + kubeletNode
	var vmID string
	testutil.Eventually(t, 4*time.Minute, "the pinned VM pod Running in kubelet's /pods", func() error {
		pods, err := k.pods()
		if err == nil {
			vmID, _, err = pods[name].running()
		}
		return err
	})
	waitLogs(t, c, vmID, vmMarker, 90*time.Second)

	pods, _ := k.pods()
	want := assignedCPUs(t, k, pods[name].Metadata.UID)
	domain := domainOf(vmID)
	pid := qemuPID(t, domain)
	vcpus := vcpuThreads(t, pid)
	if len(vcpus) == 0 {
		t.Fatalf("qemu %d has no vCPU threads", pid)
	}
	for tid, comm := range vcpus {
		if got := cpusAllowed(t, pid, tid); got != want {
			t.Errorf("%s (thread %d) may run on CPUs %s; kubelet assigned %s", comm, tid, got, want)
		}
	}
	if got := cpusAllowed(t, pid, pid); got != want {
		t.Errorf("qemu's main thread may run on CPUs %s; kubelet assigned %s", got, want)
	}
	used := freeBefore - hugePagesFree(t)
	t.Logf("VM %s: %d vCPU threads on CPU %s (kubelet's), %d huge pages taken", vmID, len(vcpus), want, used)
	if used != 128 {
		t.Errorf("HugePages_Free dropped by %d pages while the VM runs, want 128 (its 256 MiB RAM)", used)
	}
	if xml := virsh(t, "dumpxml", domain); !strings.Contains(xml, "<hugepages>") {
		t.Errorf("the domain has no huge page memory backing:\n%s", xml)
	}

	k.removeManifest("vm-pinned.yaml")
	waitSandboxesGone(t, c, kubeletNamespace)
	testutil.Eventually(t, 30*time.Second, "the huge pages given back", func() error {
		if free := hugePagesFree(t); free != freeBefore {
			return fmt.Errorf("HugePages_Free %d, was %d", free, freeBefore)
		}
		return nil
	})
}

// reserveHugePages grows the node's pool of 2 MiB pages by n for the
// test (kubelet counts them as hugepages-2Mi capacity when it starts).
func reserveHugePages(t *testing.T, n int) {
	t.Helper()
	path := filepath.Join(hugePages2M, "nr_hugepages")
	was, err := strconv.Atoi(strings.TrimSpace(readFile(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(was+n)), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, []byte(strconv.Itoa(was)), 0) })
	if got, _ := strconv.Atoi(strings.TrimSpace(readFile(t, path))); got != was+n {
		t.Fatalf("nr_hugepages %d after asking for %d: the kernel found too little contiguous memory", got, was+n)
	}
}

func hugePagesFree(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(hugePages2M, "free_hugepages"))))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// assignedCPUs reads the CPUs kubelet's static policy gave the pod's
// container "vm" from its checkpoint (cpu_manager_state).
func assignedCPUs(t *testing.T, k *kubeletRun, podUID string) string {
	t.Helper()
	var state struct {
		PolicyName string                       `json:"policyName"`
		Entries    map[string]map[string]string `json:"entries"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(k.dir, "root", "cpu_manager_state"))), &state); err != nil {
		t.Fatal(err)
	}
	cpus := state.Entries[podUID]["vm"]
	if state.PolicyName != "static" || cpus == "" {
		t.Fatalf("kubelet's cpu_manager_state gives pod %s no exclusive CPU: %+v", podUID, state)
	}
	return cpus
}

// vcpuThreads are qemu's vCPU threads (libvirt names them with
// debug-threads: "CPU 0/TCG", "CPU 1/KVM"), by thread id.
func vcpuThreads(t *testing.T, pid int) map[int]string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if name := strings.TrimSpace(string(comm)); strings.HasPrefix(name, "CPU ") {
			out[tid] = name
		}
	}
	return out
}

// cpusAllowed is Cpus_allowed_list of a thread of pid.
func cpusAllowed(t *testing.T, pid, tid int) string {
	t.Helper()
	for _, line := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/task/%d/status", pid, tid)), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for thread %d of %d", tid, pid)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
