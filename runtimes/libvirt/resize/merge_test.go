package resize

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// kubelet's CPU manager sends an update holding only the container's
// cpuset (cpumanager's updateContainerCPUSet); what it leaves out keeps
// its value, as in containerd: the VM's CPU and memory limits stay, and
// the cgroup's pinning follows the cpuset.
func TestUpdateCpusetOnlyKeepsLimits(t *testing.T) {
	t.Parallel()
	e := coretest.New(t)
	z := New(CoreOf(e.R))
	c := putVM(t, e, "c1", shape{memMiB: 256, maxMemMiB: 512, maxVCPUs: 2})
	c.Config.Linux.Resources.CpuQuota, c.Config.Linux.Resources.CpuPeriod = 100000, 100000
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	before := recordOf(t, z, c.ID).Config.GetLinux().GetResources()
	if err := update(z, c.ID, &runtimeapi.LinuxContainerResources{CpusetCpus: "1", CpusetMems: "0"}); err != nil {
		t.Fatal(err)
	}
	cg, _ := e.Cgroups.Get(c.Domain)
	if cg.CPUs != "1" || cg.Mems != "0" {
		t.Fatalf("cgroup cpuset %q mems %q, want 1 and 0", cg.CPUs, cg.Mems)
	}
	if cg.CPUQuota != before.GetCpuQuota() || cg.MemoryLimit < before.GetMemoryLimitInBytes() {
		t.Fatalf("a cpuset-only update changed the VM's limits: cgroup %+v, before %v", cg, before)
	}
	after := recordOf(t, z, c.ID).Config.GetLinux().GetResources()
	if after.GetCpuQuota() != before.GetCpuQuota() || after.GetMemoryLimitInBytes() != before.GetMemoryLimitInBytes() ||
		after.GetCpusetCpus() != "1" {
		t.Fatalf("record resources %v, want %v with cpuset 1", after, before)
	}
	if c := recordOf(t, z, c.ID); c.VCPUs != 1 || c.MemoryMiB != 256 {
		t.Fatalf("a cpuset-only update resized the VM: %d vCPUs, %d MiB", c.VCPUs, c.MemoryMiB)
	}
}

// TestMergeResources: every field an update sets replaces the old one;
// one it leaves at its zero value keeps the old.
func TestMergeResources(t *testing.T) {
	t.Parallel()
	old := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 200000, CpuShares: 2048, MemoryLimitInBytes: 256 << 20,
		OomScoreAdj: 100, MemorySwapLimitInBytes: 256 << 20, CpusetCpus: "0-1", CpusetMems: "0",
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1 << 30}}, Unified: map[string]string{"a": "1"}}
	if got := mergeResources(old, &runtimeapi.LinuxContainerResources{}); got.String() != old.String() {
		t.Fatalf("an empty update changed %v to %v", old, got)
	}
	update := &runtimeapi.LinuxContainerResources{CpuPeriod: 50000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 512 << 20,
		OomScoreAdj: -100, MemorySwapLimitInBytes: 512 << 20, CpusetCpus: "2", CpusetMems: "1",
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "1GB", Limit: 2 << 30}}, Unified: map[string]string{"b": "2"}}
	if got := mergeResources(old, update); got.String() != update.String() {
		t.Fatalf("a full update gave %v, want %v", got, update)
	}
	if old.GetCpuQuota() != 200000 {
		t.Fatal("the merge changed the old resources")
	}
	if got := mergeResources(nil, update); got.String() != update.String() {
		t.Fatalf("an update of nothing gave %v, want %v", got, update)
	}
}
