package criservice

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubelet's CPU manager sends an update holding only the container's
// cpuset (cpumanager's updateContainerCPUSet); what it leaves out keeps
// its value, as in containerd: the VM's CPU and memory limits stay.
func TestUpdateCpusetOnlyKeepsLimits(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	cfg := podConfig(t, "pinned")
	id := createVM(t, s, runPod(t, s, cfg), cfg, vmConfig(256, 100000, 100000))
	startVM(t, s, id)
	before := recordOf(t, s, id).Config.GetLinux().GetResources()
	if before.GetCpuQuota() == 0 || before.GetMemoryLimitInBytes() == 0 {
		t.Fatalf("test VM has no limits to keep: %v", before)
	}
	if err := update(s, id, &runtimeapi.LinuxContainerResources{CpusetCpus: "1", CpusetMems: "0"}); err != nil {
		t.Fatal(err)
	}
	cg := e.Cgroups.Live["crimux-"+id]
	if cg.CPUs != "1" || cg.Mems != "0" {
		t.Fatalf("cgroup cpuset %q mems %q, want 1 and 0", cg.CPUs, cg.Mems)
	}
	if cg.CPUQuota != before.GetCpuQuota() || cg.MemoryLimit < before.GetMemoryLimitInBytes() {
		t.Fatalf("a cpuset-only update changed the VM's limits: cgroup %+v, before %v", cg, before)
	}
	after := recordOf(t, s, id).Config.GetLinux().GetResources()
	if after.GetCpuQuota() != before.GetCpuQuota() || after.GetMemoryLimitInBytes() != before.GetMemoryLimitInBytes() ||
		after.GetCpusetCpus() != "1" {
		t.Fatalf("record resources %v, want %v with cpuset 1", after, before)
	}
	// The shared pool again: the pinning follows.
	if err := update(s, id, &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1"}); err != nil {
		t.Fatal(err)
	}
	if cg := e.Cgroups.Live["crimux-"+id]; cg.CPUs != "0-1" || cg.Mems != "0" {
		t.Fatalf("cgroup cpuset %q mems %q after the pool update, want 0-1 and 0", cg.CPUs, cg.Mems)
	}
}
