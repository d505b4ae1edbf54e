package vmstats

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestVMSamples: each VM is named by its pod's namespace and name and its
// container's name; a running one carries its cgroup's CPU and memory,
// its guest's memory and its I/O; one not running carries its state
// alone; libvirtd failing leaves its figures at zero, the sample there.
func TestVMSamples(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutPod(t, "sb1", nil)
	c := e.PutVM(t, "sb1", "c1", running, vmtypes.PowerRunning)
	e.PutPod(t, "sb2", nil)
	e.PutVM(t, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerShutdown)
	e.Cgroups.CPU, e.Cgroups.Memory = 3e9, 300<<20
	if err := e.R.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
		t.Fatal(err)
	}
	io := virt.IO{BlockReadBytes: 1, BlockWriteBytes: 2, NetReceiveBytes: 3, NetSendBytes: 4}
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		d.IO = io
		d.GuestMemory = &virt.GuestMemory{TotalBytes: 1 << 30, UsableBytes: 1<<30 - 100<<20}
	})

	got, err := e.meter.VMSamples()
	if err != nil || len(got) != 2 {
		t.Fatalf("VMSamples = %+v, %v; want two", got, err)
	}
	byPod := map[string]vmtypes.VMSample{got[0].Pod: got[0], got[1].Pod: got[1]}
	want := vmtypes.VMSample{Namespace: "ns", Pod: "sb1", Container: "vm", PowerState: "running", Running: true, CPUSeconds: 3,
		MemoryBytes: 300 << 20, GuestMemoryBytes: 100 << 20, BlockReadBytes: 1, BlockWriteBytes: 2, NetReceiveBytes: 3, NetSendBytes: 4}
	if byPod["sb1"] != want {
		t.Errorf("the running VM: %+v\nwant %+v", byPod["sb1"], want)
	}
	if s := byPod["sb2"]; s.PowerState != "not_running" || s.Running || s.CPUSeconds != 0 || s.Namespace != "ns" {
		t.Errorf("the exited VM: %+v, want not_running with no figures", s)
	}

	e.Libvirt.Fail("IO", boom)
	got, err = e.meter.VMSamples()
	if err != nil || len(got) != 2 {
		t.Fatalf("with IO failing: %+v, %v; want both samples", got, err)
	}
}
