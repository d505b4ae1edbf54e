package resize

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

var errBoom = errors.New("boom")

func update(z *Resizer, id string, res *runtimeapi.LinuxContainerResources) error {
	return z.Resize(context.Background(), id, res)
}

// limits is what kubelet sends for a container of cpus CPUs and memMiB of
// memory limit.
func limits(cpus, memMiB int64) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: cpus * 100000, CpuShares: cpus * 1024, MemoryLimitInBytes: memMiB << 20}
}

// shape is a VM as CreateContainer makes it: memMiB of RAM (its memory
// limit too) and 1 vCPU, room to grow to maxVCPUs and maxMemMiB, its
// domain with the virtio-mem device that room gives it.
type shape struct {
	memMiB, maxMemMiB uint64
	maxVCPUs          uint
	accel             string
	state             runtimeapi.ContainerState
	power             vmtypes.PowerState
}

// putVM records VM id of shape sh in pod "sb-"+id and defines its domain.
func putVM(t *testing.T, e *coretest.Env, id string, sh shape) *store.Container {
	t.Helper()
	if sh.state == 0 && sh.power == "" {
		sh.state, sh.power = runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning
	}
	e.PutPod(t, "sb-"+id, nil)
	c := e.PutVM(t, "sb-"+id, id, sh.state, sh.power)
	c.MemoryMiB, c.BootMemoryMiB, c.MaxMemoryMiB, c.MaxVCPUs = sh.memMiB, sh.memMiB, sh.maxMemMiB, sh.maxVCPUs
	if sh.accel != "" {
		c.Accel = sh.accel
	}
	c.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: int64(sh.memMiB) << 20}}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		d.XML = domainXML(t, c.Domain, sh.maxMemMiB-min(sh.maxMemMiB, sh.memMiB))
	})
	return c
}

// domainXML is a domain with a virtio-mem device of roomMiB (none for 0).
func domainXML(t *testing.T, name string, roomMiB uint64) string {
	t.Helper()
	d := libvirtxml.Domain{Type: "qemu", Name: name, Devices: &libvirtxml.DomainDeviceList{}}
	if roomMiB > 0 {
		d.Devices.Memorydevs = []libvirtxml.DomainMemorydev{*vm.MemoryDevice(roomMiB, 0)}
	}
	out, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// resizableVM is a running VM of 1 vCPU and 256 MiB that can grow to 4
// vCPUs and 768 MiB, its guest plugging what it is asked.
func resizableVM(t *testing.T) (*Resizer, *coretest.Env, string) {
	t.Helper()
	e := coretest.New(t)
	c := putVM(t, e, "c1", shape{memMiB: 256, maxMemMiB: 768, maxVCPUs: 4})
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.GuestPlugs = true })
	return New(CoreOf(e.R)), e, c.ID
}

func recordOf(t *testing.T, z *Resizer, id string) *store.Container {
	t.Helper()
	c, err := z.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantCode fails the test unless err has code and names words.
func wantCode(t *testing.T, what string, err error, code codes.Code, words string) {
	t.Helper()
	if errdefs.Code(err) != code || err == nil || !strings.Contains(err.Error(), words) {
		t.Fatalf("%s: %v (%s), want %s naming %q", what, err, errdefs.Code(err), code, words)
	}
}

func TestResizeRunningVM(t *testing.T) {
	t.Parallel()
	z, e, id := resizableVM(t)
	l, dom := e.Libvirt, "crimux-"+id
	if err := update(z, id, limits(2, 512)); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Domain(dom)
	if d.VCPUs != 2 || d.Memory != (virt.MemoryPlug{SizeMiB: 512, RequestedMiB: 256, CurrentMiB: 256}) {
		t.Fatalf("domain after growing: %d vCPUs, memory %+v; want 2, 256 of 512 MiB plugged", d.VCPUs, d.Memory)
	}
	c := recordOf(t, z, id)
	if c.VCPUs != 2 || c.MemoryMiB != 512 || c.BootMemoryMiB != 256 {
		t.Fatalf("record after growing: %d vCPUs, %d MiB (boot %d)", c.VCPUs, c.MemoryMiB, c.BootMemoryMiB)
	}
	if res := c.Config.GetLinux().GetResources(); res.GetMemoryLimitInBytes() != 512<<20 {
		t.Fatalf("record resources %v, want the update", res)
	}
	// Back to 1 vCPU; an odd size is plugged in whole 2 MiB blocks.
	if err := update(z, id, limits(1, 301)); err != nil {
		t.Fatal(err)
	}
	d, _ = l.Domain(dom)
	if d.VCPUs != 1 || d.Memory.RequestedMiB != 46 {
		t.Fatalf("domain after shrinking: %d vCPUs, memory %+v; want 1, 46 MiB requested", d.VCPUs, d.Memory)
	}
	if d.LiveVCPUs != 2 {
		t.Fatalf("under TCG the running domain has %d vCPUs plugged after shrinking, want 2 (left plugged, offline)", d.LiveVCPUs)
	}
	if c := recordOf(t, z, id); c.PluggedVCPUs != 2 {
		t.Fatalf("record after shrinking under TCG: %d vCPUs plugged, want 2", c.PluggedVCPUs)
	}
	// No CPU and no memory limit: the size stays.
	if err := update(z, id, &runtimeapi.LinuxContainerResources{}); err != nil {
		t.Fatal(err)
	}
	if c := recordOf(t, z, id); c.VCPUs != 1 || c.MemoryMiB != 302 {
		t.Fatalf("record after an update without limits: %d vCPUs, %d MiB; want 1 and 302", c.VCPUs, c.MemoryMiB)
	}
	// Growing past what stayed plugged: nothing is left plugged beyond.
	if err := update(z, id, limits(3, 302)); err != nil {
		t.Fatal(err)
	}
	if c := recordOf(t, z, id); c.VCPUs != 3 || c.PluggedVCPUs != 0 {
		t.Fatalf("record after growing to 3: %d vCPUs, %d left plugged; want 3 and 0", c.VCPUs, c.PluggedVCPUs)
	}
}

func TestResizeCgroupFollows(t *testing.T) {
	t.Parallel()
	e := coretest.New(t)
	z := New(CoreOf(e.R))
	id := putVM(t, e, "c1", shape{memMiB: 256, maxMemMiB: 1024, maxVCPUs: 1}).ID
	e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = true })
	if err := update(z, id, limits(1, 512)); err != nil {
		t.Fatal(err)
	}
	cg, _ := e.Cgroups.Get("crimux-" + id)
	if cg.MemoryLimit != (512+64)<<20 || cg.CPUQuota != 100000 || cg.CPUShares != 1024 {
		t.Fatalf("cgroup after the resize: %+v", cg)
	}
	e.Cgroups.Fail = errBoom
	if err := update(z, id, limits(1, 1024)); !errors.Is(err, errBoom) {
		t.Fatalf("resize with the cgroup failing: %v", err)
	}
	if d, _ := e.Libvirt.Domain("crimux-" + id); d.Memory.RequestedMiB != 256 {
		t.Fatalf("a resize whose cgroup failed plugged memory: %+v", d.Memory)
	}
	if c := recordOf(t, z, id); c.MemoryMiB != 512 {
		t.Fatalf("a failed resize was recorded: %d MiB", c.MemoryMiB)
	}
}

// A size outside the VM's room is refused naming the field; nothing
// changes.
func TestResizeOutOfBounds(t *testing.T) {
	t.Parallel()
	z, e, id := resizableVM(t)
	for _, tc := range []struct {
		name  string
		res   *runtimeapi.LinuxContainerResources
		field string
	}{
		{"below the boot RAM", limits(1, 128), "linux.memory_limit_in_bytes"},
		{"above the maximum RAM", limits(1, 1024), "linux.memory_limit_in_bytes"},
		{"more vCPUs than the maximum", limits(5, 256), "linux.cpu_quota"},
	} {
		err := update(z, id, tc.res)
		wantCode(t, tc.name, err, codes.InvalidArgument, tc.field)
	}
	if d, _ := e.Libvirt.Domain("crimux-" + id); d.VCPUs != 0 || d.Memory != (virt.MemoryPlug{}) {
		t.Fatalf("refused resizes changed the domain: %+v", d)
	}
	wantCode(t, "no linux", update(z, id, nil), codes.InvalidArgument, "linux")
	wantCode(t, "unknown VM", update(z, "nope", limits(1, 256)), codes.NotFound, "nope")
}

// A guest that does not plug the memory (no virtio-mem driver): refused,
// the request and the vCPUs put back, the record unchanged.
func TestResizeGuestDoesNotPlug(t *testing.T) {
	t.Parallel()
	z, e, id := resizableVM(t)
	e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = false })
	z.PlugWait = 300 * time.Millisecond
	err := update(z, id, limits(2, 512))
	wantCode(t, "a guest that does not plug", err, codes.FailedPrecondition, "virtio_mem")
	d, _ := e.Libvirt.Domain("crimux-" + id)
	if d.VCPUs != 1 || d.Memory.RequestedMiB != 0 {
		t.Fatalf("after a failed resize: %d vCPUs, memory %+v; want 1 vCPU and nothing requested", d.VCPUs, d.Memory)
	}
	if c := recordOf(t, z, id); c.VCPUs != 1 || c.MemoryMiB != 256 {
		t.Fatalf("a failed resize was recorded: %d vCPUs, %d MiB", c.VCPUs, c.MemoryMiB)
	}
}

// A VM its user paused is not resized; a created one gets the new size
// in its definition, for its boot.
func TestResizeByPowerState(t *testing.T) {
	t.Parallel()
	e := coretest.New(t)
	z := New(CoreOf(e.R))
	e.PutPod(t, "sb1", nil) // a record as coretest leaves it: no resources, no boot RAM of its own
	paused := e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
	paused.MaxVCPUs = 4
	if err := e.R.Store.PutContainer(paused); err != nil {
		t.Fatal(err)
	}
	err := update(z, paused.ID, limits(2, 128))
	wantCode(t, "a paused VM", err, codes.FailedPrecondition, "Paused")

	created := putVM(t, e, "c2", shape{memMiB: 256, maxMemMiB: 512, maxVCPUs: 4,
		state: runtimeapi.ContainerState_CONTAINER_CREATED, power: vmtypes.PowerRunning})
	if err := update(z, created.ID, limits(3, 256)); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Libvirt.Domain(created.Domain); d.VCPUs != 3 {
		t.Fatalf("created VM: domain has %d vCPUs set, want 3 (its definition)", d.VCPUs)
	}
	if _, ok := e.Cgroups.Get(created.Domain); ok {
		t.Fatal("a cgroup made for a VM that is not running")
	}
}

// With KVM the vCPUs going away are unplugged; an unplug libvirt reports
// timed out leaves them plugged (offline in the guest) and the resize
// still succeeds, the definition and the record at the new size.
func TestResizeUnplugsVCPUsWithKVM(t *testing.T) {
	t.Parallel()
	for _, timesOut := range []bool{false, true} {
		e := coretest.New(t)
		z := New(CoreOf(e.R))
		id := putVM(t, e, "c1", shape{memMiB: 256, maxMemMiB: 512, maxVCPUs: 4, accel: vm.AccelKVM}).ID
		dom := "crimux-" + id
		if err := update(z, id, limits(3, 256)); err != nil {
			t.Fatal(err)
		}
		e.Libvirt.Edit(dom, func(d *virtfake.Domain) { d.UnplugTimesOut = timesOut })
		if err := update(z, id, limits(1, 256)); err != nil {
			t.Fatalf("unplug timing out %v: %v", timesOut, err)
		}
		d, _ := e.Libvirt.Domain(dom)
		wantLive := uint(1)
		if timesOut {
			wantLive = 3
		}
		if d.VCPUs != 1 || d.LiveVCPUs != wantLive {
			t.Fatalf("unplug timing out %v: definition %d vCPUs, running %d; want 1 and %d", timesOut, d.VCPUs, d.LiveVCPUs, wantLive)
		}
		if c := recordOf(t, z, id); c.VCPUs != 1 {
			t.Fatalf("unplug timing out %v: record has %d vCPUs, want 1", timesOut, c.VCPUs)
		}
	}
}

// A VM made with no memory room (under minResizableMemoryMiB): its
// vCPUs still resize, its RAM does not.
func TestSmallVMResizesItsVCPUsAlone(t *testing.T) {
	t.Parallel()
	e := coretest.New(t)
	z := New(CoreOf(e.R))
	id := putVM(t, e, "c1", shape{memMiB: 128, maxMemMiB: 128, maxVCPUs: 2}).ID
	if err := update(z, id, limits(2, 128)); err != nil {
		t.Fatalf("vCPUs of a small VM: %v", err)
	}
	err := update(z, id, limits(2, 256))
	wantCode(t, "RAM of a small VM", err, codes.InvalidArgument, "linux.memory_limit_in_bytes")
}

// TestHeadroom: vCPUs can grow to libvirt.max_vcpus (else the node's
// CPUs, never under the VM's own nor over vm.MaxVCPUs); RAM to
// libvirt.max_memory_mib (else twice the boot RAM), from
// minResizableMemoryMiB and not for huge pages.
func TestHeadroom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		maxV  int
		maxM  int64
		res   vm.Resources
		wantV uint
		wantM uint64
	}{
		{"bounds set", 4, 768, vm.Resources{VCPUs: 1, MemoryMiB: 256}, 4, 768},
		{"no memory bound: twice the boot RAM", 4, 0, vm.Resources{VCPUs: 1, MemoryMiB: 256}, 4, 512},
		{"a bound under the VM's own", 1, 128, vm.Resources{VCPUs: 2, MemoryMiB: 256}, 2, 256},
		{"too small for a memory device", 4, 768, vm.Resources{VCPUs: 1, MemoryMiB: 128}, 4, 128},
		{"huge pages", 4, 768, vm.Resources{VCPUs: 1, MemoryMiB: 256, HugePages: vm.HugePages{PageKiB: 2048}}, 4, 256},
		{"past the most vCPUs", vm.MaxVCPUs + 1, 768, vm.Resources{VCPUs: 1, MemoryMiB: 256}, vm.MaxVCPUs, 768},
	} {
		gotV, gotM := Headroom(&core.Options{MaxVCPUs: tc.maxV, MaxMemoryMiB: tc.maxM}, tc.res)
		if gotV != tc.wantV || gotM != tc.wantM {
			t.Errorf("%s: room to %d vCPUs and %d MiB, want %d and %d", tc.name, gotV, gotM, tc.wantV, tc.wantM)
		}
	}
	if v, _ := Headroom(&core.Options{}, vm.Resources{VCPUs: 1, MemoryMiB: 256}); v < 1 {
		t.Errorf("no vCPU bound: room to %d vCPUs, want the node's CPUs", v)
	}
}
