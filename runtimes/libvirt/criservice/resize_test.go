package criservice

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

func update(s *Service, id string, res *runtimeapi.LinuxContainerResources) error {
	_, err := s.UpdateContainerResources(context.Background(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: res})
	return err
}

// limits is what kubelet sends for a container of cpus CPUs and memMiB of
// memory limit.
func limits(cpus, memMiB int64) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: cpus * 100000, CpuShares: cpus * 1024, MemoryLimitInBytes: memMiB << 20}
}

// resizableVM is a running VM of 1 vCPU and 256 MiB that can grow to 4
// vCPUs and 768 MiB, its guest plugging what it is asked.
func resizableVM(t *testing.T) (*Service, *virtfake.Libvirt, string) {
	t.Helper()
	s, e := newService(t)
	s.Opts.MaxVCPUs, s.Opts.MaxMemoryMiB = 4, 768
	_, id := runningVM(t, s, "web")
	e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = true })
	return s, e.Libvirt, id
}

func TestResizeRunningVM(t *testing.T) {
	t.Parallel()
	s, l, id := resizableVM(t)
	dom := "crimux-" + id
	if err := update(s, id, limits(2, 512)); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Domain(dom)
	if d.VCPUs != 2 || d.Memory != (virt.MemoryPlug{SizeMiB: 512, RequestedMiB: 256, CurrentMiB: 256}) {
		t.Fatalf("domain after growing: %d vCPUs, memory %+v; want 2, 256 of 512 MiB plugged", d.VCPUs, d.Memory)
	}
	c := recordOf(t, s, id)
	if c.VCPUs != 2 || c.MemoryMiB != 512 || c.BootMemoryMiB != 256 {
		t.Fatalf("record after growing: %d vCPUs, %d MiB (boot %d)", c.VCPUs, c.MemoryMiB, c.BootMemoryMiB)
	}
	if st := status(t, s, id); st.Resources.GetLinux().GetMemoryLimitInBytes() != 512<<20 {
		t.Fatalf("status resources %v, want the update", st.Resources)
	}
	// Back to 1 vCPU; an odd size is plugged in whole 2 MiB blocks.
	if err := update(s, id, limits(1, 301)); err != nil {
		t.Fatal(err)
	}
	d, _ = l.Domain(dom)
	if d.VCPUs != 1 || d.Memory.RequestedMiB != 46 {
		t.Fatalf("domain after shrinking: %d vCPUs, memory %+v; want 1, 46 MiB requested", d.VCPUs, d.Memory)
	}
	if d.LiveVCPUs != 2 {
		t.Fatalf("under TCG the running domain has %d vCPUs plugged after shrinking, want 2 (left plugged, offline)", d.LiveVCPUs)
	}
	if c := recordOf(t, s, id); c.PluggedVCPUs != 2 {
		t.Fatalf("record after shrinking under TCG: %d vCPUs plugged, want 2", c.PluggedVCPUs)
	}
	// No CPU and no memory limit: the size stays.
	if err := update(s, id, &runtimeapi.LinuxContainerResources{}); err != nil {
		t.Fatal(err)
	}
	if c := recordOf(t, s, id); c.VCPUs != 1 || c.MemoryMiB != 302 {
		t.Fatalf("record after an update without limits: %d vCPUs, %d MiB; want 1 and 302", c.VCPUs, c.MemoryMiB)
	}
	// Growing past what stayed plugged: nothing is left plugged beyond.
	if err := update(s, id, limits(3, 302)); err != nil {
		t.Fatal(err)
	}
	if c := recordOf(t, s, id); c.VCPUs != 3 || c.PluggedVCPUs != 0 {
		t.Fatalf("record after growing to 3: %d vCPUs, %d left plugged; want 3 and 0", c.VCPUs, c.PluggedVCPUs)
	}
}

func TestResizeCgroupFollows(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	s.Opts.MaxMemoryMiB = 1024
	_, id := runningVM(t, s, "web")
	e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = true })
	if err := update(s, id, limits(1, 512)); err != nil {
		t.Fatal(err)
	}
	cg, _ := e.Cgroups.Get("crimux-" + id)
	if cg.MemoryLimit != (512+64)<<20 || cg.CPUQuota != 100000 || cg.CPUShares != 1024 {
		t.Fatalf("cgroup after the resize: %+v", cg)
	}
	e.Cgroups.Fail = errBoom
	if err := update(s, id, limits(1, 1024)); !errors.Is(err, errBoom) {
		t.Fatalf("resize with the cgroup failing: %v", err)
	}
	if d, _ := e.Libvirt.Domain("crimux-" + id); d.Memory.RequestedMiB != 256 {
		t.Fatalf("a resize whose cgroup failed plugged memory: %+v", d.Memory)
	}
	if c := recordOf(t, s, id); c.MemoryMiB != 512 {
		t.Fatalf("a failed resize was recorded: %d MiB", c.MemoryMiB)
	}
}

// A size outside the VM's room is refused naming the field; nothing
// changes.
func TestResizeOutOfBounds(t *testing.T) {
	t.Parallel()
	s, l, id := resizableVM(t)
	for _, tc := range []struct {
		name  string
		res   *runtimeapi.LinuxContainerResources
		field string
	}{
		{"below the boot RAM", limits(1, 128), "linux.memory_limit_in_bytes"},
		{"above the maximum RAM", limits(1, 1024), "linux.memory_limit_in_bytes"},
		{"more vCPUs than the maximum", limits(5, 256), "linux.cpu_quota"},
	} {
		err := update(s, id, tc.res)
		wantCode(t, tc.name, err, codes.InvalidArgument, tc.field)
	}
	if d, _ := l.Domain("crimux-" + id); d.VCPUs != 0 || d.Memory != (virt.MemoryPlug{}) {
		t.Fatalf("refused resizes changed the domain: %+v", d)
	}
	wantCode(t, "no linux", update(s, id, nil), codes.InvalidArgument, "linux")
	wantCode(t, "unknown VM", update(s, "nope", limits(1, 256)), codes.NotFound, "nope")
}

// A guest that does not plug the memory (no virtio-mem driver): refused,
// the request and the vCPUs put back, the record unchanged.
func TestResizeGuestDoesNotPlug(t *testing.T) {
	t.Parallel()
	s, l, id := resizableVM(t)
	l.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = false })
	s.plugWait = 300 * time.Millisecond
	err := update(s, id, limits(2, 512))
	wantCode(t, "a guest that does not plug", err, codes.FailedPrecondition, "virtio_mem")
	d, _ := l.Domain("crimux-" + id)
	if d.VCPUs != 1 || d.Memory.RequestedMiB != 0 {
		t.Fatalf("after a failed resize: %d vCPUs, memory %+v; want 1 vCPU and nothing requested", d.VCPUs, d.Memory)
	}
	if c := recordOf(t, s, id); c.VCPUs != 1 || c.MemoryMiB != 256 {
		t.Fatalf("a failed resize was recorded: %d vCPUs, %d MiB", c.VCPUs, c.MemoryMiB)
	}
}

// A VM its user paused is not resized; a created one gets the new size
// in its definition, for its boot.
func TestResizeByPowerState(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	s.Opts.MaxVCPUs = 4
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
	c.MaxVCPUs = 4
	if err := s.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	err := update(s, c.ID, limits(2, 128))
	wantCode(t, "a paused VM", err, codes.FailedPrecondition, "Paused")

	s2, e2 := newService(t)
	s2.Opts.MaxVCPUs = 4
	cfg := podConfig(t, "web")
	sb := runPod(t, s2, cfg)
	id := createVM(t, s2, sb, cfg, vmConfig(256, 0, 0))
	if err := update(s2, id, limits(3, 256)); err != nil {
		t.Fatal(err)
	}
	if d, _ := e2.Libvirt.Domain("crimux-" + id); d.VCPUs != 3 {
		t.Fatalf("created VM: domain has %d vCPUs set, want 3 (its definition)", d.VCPUs)
	}
	if _, ok := e2.Cgroups.Get("crimux-" + id); ok {
		t.Fatal("a cgroup made for a VM that is not running")
	}
}

func TestUpdatePodSandboxResources(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	sb := runPod(t, s, podConfig(t, "web"))
	ctx := context.Background()
	if _, err := s.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: sb}); err != nil {
		t.Fatalf("UpdatePodSandboxResources of a VM pod: %v", err)
	}
	_, err := s.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: "nope"})
	wantCode(t, "unknown pod", err, codes.NotFound, "nope")
}

func recordOf(t *testing.T, s *Service, id string) *store.Container {
	t.Helper()
	c, err := s.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With KVM the vCPUs going away are unplugged; an unplug libvirt reports
// timed out leaves them plugged (offline in the guest) and the resize
// still succeeds, the definition and the record at the new size.
func TestResizeUnplugsVCPUsWithKVM(t *testing.T) {
	t.Parallel()
	for _, timesOut := range []bool{false, true} {
		s, e := newService(t)
		s.Accel = "kvm"
		s.Opts.MaxVCPUs = 4
		_, id := runningVM(t, s, "web")
		dom := "crimux-" + id
		if err := update(s, id, limits(3, 256)); err != nil {
			t.Fatal(err)
		}
		e.Libvirt.Edit(dom, func(d *virtfake.Domain) { d.UnplugTimesOut = timesOut })
		if err := update(s, id, limits(1, 256)); err != nil {
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
		if c := recordOf(t, s, id); c.VCPUs != 1 {
			t.Fatalf("unplug timing out %v: record has %d vCPUs, want 1", timesOut, c.VCPUs)
		}
	}
}

// A VM booting with less than minResizableMemoryMiB gets no memory
// device (it costs the guest boot memory: a 128 MiB guest panicked with
// it): its vCPUs still resize, its RAM does not.
func TestSmallVMHasNoMemoryRoom(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	s.Opts.MaxVCPUs = 2
	cfg := podConfig(t, "small")
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	startVM(t, s, id)
	c := recordOf(t, s, id)
	if c.MaxMemoryMiB != 128 || c.MaxVCPUs != 2 {
		t.Fatalf("128 MiB VM: room to %d vCPUs and %d MiB; want 2 and 128 (none)", c.MaxVCPUs, c.MaxMemoryMiB)
	}
	if d, _ := e.Libvirt.Domain("crimux-" + id); strings.Contains(d.XML, "virtio-mem") || strings.Contains(d.XML, "<numa>") {
		t.Fatalf("128 MiB VM defined with a memory device or NUMA cell:\n%s", d.XML)
	}
	if err := update(s, id, limits(2, 128)); err != nil {
		t.Fatalf("vCPUs of a small VM: %v", err)
	}
	err := update(s, id, limits(2, 256))
	wantCode(t, "RAM of a small VM", err, codes.InvalidArgument, "linux.memory_limit_in_bytes")
}
