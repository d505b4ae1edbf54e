package core_test

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestCgroupForDomain: the cgroup of a VM of this runtime, limited as
// its container asks plus qemu's overhead; none for another domain.
func TestCgroupForDomain(t *testing.T) {
	e := coretest.New(t)
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
	c.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
		CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 100 << 20}}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	cg, ok := e.R.CgroupForDomain("crimux-c1")
	want := core.VMCgroup{Parent: "/kubepods/podsb1", Name: "crimux-c1", CPUQuota: 50000, CPUPeriod: 100000, CPUShares: 512,
		MemoryLimit: (128 + 64) << 20} // RAM (128 MiB) above the limit, plus the overhead
	if !ok || cg != want {
		t.Fatalf("CgroupForDomain = %+v, %v; want %+v", cg, ok, want)
	}
	for _, d := range []string{"crimux-nope", "other", ""} {
		if cg, ok := e.R.CgroupForDomain(d); ok {
			t.Errorf("CgroupForDomain(%q) = %+v, want none", d, cg)
		}
	}
}

func TestCgroupOf(t *testing.T) {
	e := coretest.New(t)
	for _, tc := range []struct {
		name string
		res  *runtimeapi.LinuxContainerResources
		ram  uint64
		want core.VMCgroup
	}{
		{"limit above RAM", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 300 << 20, CpuQuota: 150000, CpuPeriod: 50000},
			256, core.VMCgroup{MemoryLimit: (300 + 64) << 20, CPUQuota: 150000, CPUPeriod: 50000}},
		{"RAM above limit", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}, 256,
			core.VMCgroup{MemoryLimit: (256 + 64) << 20}},
		{"no resources", nil, 128, core.VMCgroup{MemoryLimit: (128 + 64) << 20}},
		{"quota without period", &runtimeapi.LinuxContainerResources{CpuQuota: 20000}, 128,
			core.VMCgroup{MemoryLimit: (128 + 64) << 20, CPUQuota: 20000, CPUPeriod: 100000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &store.Container{Domain: "crimux-x", CgroupParent: "/p", MemoryMiB: tc.ram,
				Config: &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: tc.res}}}
			tc.want.Parent, tc.want.Name = "/p", "crimux-x"
			if got := e.R.CgroupOf(c); got != tc.want {
				t.Fatalf("CgroupOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
