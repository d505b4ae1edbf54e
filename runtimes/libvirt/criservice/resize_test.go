package criservice

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
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

func recordOf(t *testing.T, s *Service, id string) *store.Container {
	t.Helper()
	c, err := s.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestResizeThroughCRI: a VM made and started through CRI is resized
// through UpdateContainerResources: its domain, its record and its status
// follow; a request without Linux resources, or for no VM, is refused.
func TestResizeThroughCRI(t *testing.T) {
	t.Parallel()
	s, e := newService(t)
	s.Opts.MaxVCPUs, s.Opts.MaxMemoryMiB = 4, 768
	_, id := runningVM(t, s, "web")
	e.Libvirt.Edit("crimux-"+id, func(d *virtfake.Domain) { d.GuestPlugs = true })
	if err := update(s, id, limits(2, 512)); err != nil {
		t.Fatal(err)
	}
	d, _ := e.Libvirt.Domain("crimux-" + id)
	if d.VCPUs != 2 || d.Memory != (virt.MemoryPlug{SizeMiB: 512, RequestedMiB: 256, CurrentMiB: 256}) {
		t.Fatalf("domain after growing: %d vCPUs, memory %+v; want 2, 256 of 512 MiB plugged", d.VCPUs, d.Memory)
	}
	if c := recordOf(t, s, id); c.VCPUs != 2 || c.MemoryMiB != 512 || c.BootMemoryMiB != 256 {
		t.Fatalf("record after growing: %d vCPUs, %d MiB (boot %d)", c.VCPUs, c.MemoryMiB, c.BootMemoryMiB)
	}
	if st := status(t, s, id); st.Resources.GetLinux().GetMemoryLimitInBytes() != 512<<20 {
		t.Fatalf("status resources %v, want the update", st.Resources)
	}
	wantCode(t, "above the maximum RAM", update(s, id, limits(1, 1024)), codes.InvalidArgument, "linux.memory_limit_in_bytes")
	wantCode(t, "no linux", update(s, id, nil), codes.InvalidArgument, "linux")
	wantCode(t, "unknown VM", update(s, "nope", limits(1, 256)), codes.NotFound, "nope")
}

// TestResizeUnwired: a CRI face without a Resizer refuses every resize.
func TestResizeUnwired(t *testing.T) {
	t.Parallel()
	s, _ := newService(t)
	s.Resizer = nil
	_, id := runningVM(t, s, "web")
	wantCode(t, "no resizer", update(s, id, limits(1, 256)), codes.Unimplemented, "resize")
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

// A VM booting with less than the least resizable RAM gets no memory
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
