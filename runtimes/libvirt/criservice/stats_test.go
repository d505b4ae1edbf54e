package criservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestGuestMemoryAsContainerUsage: a VM whose guest reports its memory
// (the balloon driver) has the guest's in-use RAM as the container's
// memory usage and working set — what kubelet compares a lowered memory
// limit with — while the pod's figures stay qemu's cgroup, what the node
// pays. A guest that reports nothing falls back on the cgroup, and the
// CPU is the cgroup's either way; a list reports as ContainerStats does.
func TestGuestMemoryAsContainerUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, e := newService(t)
	e.Cgroups.CPU, e.Cgroups.Memory = 7e9, 1300<<20
	for _, id := range []string{"c1", "c2"} {
		c := putVM(t, e, "sb-"+id, id, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
		if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
			t.Fatal(err)
		}
	}
	e.Libvirt.Edit("crimux-c1", func(d *virtfake.Domain) {
		d.GuestMemory = &virt.GuestMemory{TotalBytes: 1280 << 20, UsableBytes: 1100 << 20, UnusedBytes: 200 << 20}
	})
	want := map[string]uint64{"c1": 180 << 20, "c2": 1300 << 20}
	for id, mem := range want {
		resp, err := s.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		if m := resp.Stats.Memory; m.UsageBytes.Value != mem || m.WorkingSetBytes.Value != mem || resp.Stats.Cpu.UsageCoreNanoSeconds.Value != 7e9 {
			t.Errorf("ContainerStats(%s): memory %d / %d, CPU %d; want %d and 7e9", id, m.UsageBytes.Value, m.WorkingSetBytes.Value,
				resp.Stats.Cpu.UsageCoreNanoSeconds.Value, mem)
		}
	}
	l, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	if err != nil || len(l.Stats) != 2 {
		t.Fatalf("ListContainerStats: %v, %v", l, err)
	}
	for _, st := range l.Stats {
		if got := st.Memory.UsageBytes.Value; got != want[st.Attributes.Id] {
			t.Errorf("ListContainerStats: %s's memory usage %d, want %d", st.Attributes.Id, got, want[st.Attributes.Id])
		}
	}
	pod, err := s.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: "sb-c1"})
	if err != nil {
		t.Fatal(err)
	}
	if m := pod.Stats.Linux.Memory; m.UsageBytes.Value != 1300<<20 || m.WorkingSetBytes.Value != 1300<<20 {
		t.Errorf("PodSandboxStats: memory %d / %d, want the cgroup's %d", m.UsageBytes.Value, m.WorkingSetBytes.Value, 1300<<20)
	}
	if c := pod.Stats.Linux.Containers; len(c) != 1 || c[0].Memory.UsageBytes.Value != 180<<20 {
		t.Errorf("PodSandboxStats: containers %v, want c1 with the guest's usage", c)
	}
}
