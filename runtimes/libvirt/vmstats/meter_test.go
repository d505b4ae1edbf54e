package vmstats

import (
	"errors"
	"os"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/vmtypes"
)

// TestMeasure: a running VM's figures are its cgroup's, with its guest's
// account of its memory when it reports one (its container's memory
// then), the cgroup's when it reports none, libvirt fails or is away; a
// VM whose qemu does not run (exited, its guest shut down) has zeros and
// no guest figure; one whose cgroup cannot be read is an error naming
// its domain.
func TestMeasure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Cgroups.CPU, e.Cgroups.Memory = 7e9, 1300<<20
	put := func(id string, state runtimeapi.ContainerState, power vmtypes.PowerState, cgroup bool) *store.Container {
		e.PutPod(t, "sb-"+id, nil)
		c := e.PutVM(t, "sb-"+id, id, state, power)
		if cgroup {
			if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	guest := put("guest", running, vmtypes.PowerRunning, true)
	e.Libvirt.Edit(guest.Domain, func(d *virtfake.Domain) {
		d.GuestMemory = &virt.GuestMemory{TotalBytes: 1280 << 20, UsableBytes: 1100 << 20, UnusedBytes: 200 << 20}
	})
	plain := put("plain", running, vmtypes.PowerRunning, true)
	off := put("off", running, vmtypes.PowerShutdown, true)
	exited := put("exited", runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerShutdown, false)
	nocg := put("nocg", running, vmtypes.PowerRunning, false)

	cg := core.CgroupUsage{CPUNanos: 7e9, MemoryBytes: 1300 << 20, WorkingSetBytes: 1300 << 20}
	for _, tc := range []struct {
		c              *store.Container
		running        bool
		cgroup         core.CgroupUsage
		guest, ws, use uint64
		reported       bool
	}{
		{c: guest, running: true, cgroup: cg, guest: 180 << 20, reported: true, ws: 180 << 20, use: 180 << 20},
		{c: plain, running: true, cgroup: cg, ws: 1300 << 20, use: 1300 << 20},
		{c: off},
		{c: exited},
	} {
		u, err := e.meter.Measure(tc.c)
		if err != nil {
			t.Fatalf("Measure(%s): %v", tc.c.ID, err)
		}
		if u.Running != tc.running || u.Cgroup != tc.cgroup || u.GuestInUse != tc.guest || u.GuestReported != tc.reported || u.At == 0 {
			t.Errorf("Measure(%s) = %+v, want running %v, cgroup %+v, guest %d (%v)", tc.c.ID, u, tc.running, tc.cgroup, tc.guest, tc.reported)
		}
		if ws, use := u.ContainerMemory(); ws != tc.ws || use != tc.use {
			t.Errorf("%s: container memory %d / %d, want %d / %d", tc.c.ID, ws, use, tc.ws, tc.use)
		}
	}
	if _, err := e.meter.Measure(nocg); err == nil || err.Error() != "stats of crimux-nocg: no such cgroup: "+e.R.CgroupOf(nocg).Name {
		t.Errorf("Measure of a VM without cgroup: %v, want stats of crimux-nocg", err)
	}

	e.Libvirt.Fail("GuestMemory", errors.New("boom"))
	if u, err := e.meter.Measure(guest); err != nil || u.GuestReported || u.Cgroup != cg {
		t.Errorf("with GuestMemory failing: %+v, %v; want the cgroup's alone", u, err)
	}
	e.Libvirt.SetDown(errdefs.ErrUnavailable)
	if u, err := e.meter.Measure(guest); err != nil || u.GuestReported || u.Cgroup != cg {
		t.Errorf("with libvirtd away: %+v, %v; want the cgroup's alone", u, err)
	}
}

// TestWritableDisk: a VM's writable layer is its overlay's allocated
// bytes on the state dir; none without an overlay, none for a VM whose
// root disk is on a volume (kubelet counts the volume).
func TestWritableDisk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutPod(t, "sb", nil)
	c := e.PutVM(t, "sb", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	if d := e.meter.writableDisk(c); d != (Disk{Mountpoint: e.Dir}) {
		t.Fatalf("without an overlay: %+v, want none on %s", d, e.Dir)
	}
	if err := os.WriteFile(vmfiles.DiskPathOf(e.R.Store, c), make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	vm, err := e.meter.Container("c1")
	if err != nil {
		t.Fatal(err)
	}
	if d := vm.Disk; d.UsedBytes < 3<<20 || d.Inodes != 1 || d.Mountpoint != e.Dir || vm.Rec.ID != "c1" {
		t.Fatalf("with a 3 MiB overlay: %+v, want >= 3 MiB, one inode on %s", d, e.Dir)
	}
	c.RootVolume = &store.RootVolume{}
	if d := e.meter.writableDisk(c); d != (Disk{Mountpoint: e.Dir}) {
		t.Fatalf("on a volume: %+v, want none", d)
	}
}

// TestContainersAndPods: Containers measures the live VMs kept, leaving
// out those that cannot be measured; Pods each live pod kept, with its VM
// when it has one that can be; an unknown ID is NotFound.
func TestContainersAndPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.PutPod(t, "sb-"+id, nil)
		c := e.PutVM(t, "sb-"+id, id, running, vmtypes.PowerRunning)
		if id != "c" {
			if err := e.Cgroups.Create(e.R.CgroupOf(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.PutPod(t, "sb-none", nil)
	e.PutPod(t, "sb-gone", func(sb *store.Sandbox) { sb.ContainerID = "gone" })

	vms, err := e.meter.Containers(func(c *store.Container) bool { return c.ID != "b" })
	if err != nil || len(vms) != 1 || vms[0].Rec.ID != "a" || !vms[0].Running {
		t.Fatalf("Containers but b = %+v, %v; want a alone (c has no cgroup)", vms, err)
	}
	pods, err := e.meter.Pods(func(sb *store.Sandbox) bool { return sb.ID != "sb-b" })
	if err != nil || len(pods) != 4 {
		t.Fatalf("Pods but sb-b = %+v, %v; want four", pods, err)
	}
	for _, p := range pods {
		if measured := p.VM != nil; measured != (p.Rec.ID == "sb-a") {
			t.Errorf("pod %s: VM %+v; want one for sb-a alone", p.Rec.ID, p.VM)
		}
	}
	if p, err := e.meter.Pod("sb-a"); err != nil || p.VM == nil || p.VM.Rec.ID != "a" {
		t.Errorf("Pod(sb-a) = %+v, %v; want its VM a", p, err)
	}
	if _, err := e.meter.Pod("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pod(nope): %v, want NotFound", err)
	}
	if _, err := e.meter.Container("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Container(nope): %v, want NotFound", err)
	}
}
