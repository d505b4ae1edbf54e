// Package vm converts CRI pod and container specs into a VM: first a Spec
// (pure data: size, boot, disk, console, identity), then a libvirt domain
// built by small configurators with libvirtxml types — never by string
// templates. Nothing here does I/O; paths come in through Spec.
package vm

import (
	"encoding/xml"
	"fmt"
	"math"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Spec is everything the domain is made of.
type Spec struct {
	// Name is the libvirt domain name.
	Name string
	// UUID is the domain UUID (stable per container).
	UUID      string
	Meta      Metadata
	VCPUs     uint
	MemoryMiB uint64
	// MaxVCPUs and MaxMemoryMiB are what the VM can be resized to while it
	// runs (hot-plugged vCPUs, virtio-mem); at most VCPUs and MemoryMiB:
	// no room to grow.
	MaxVCPUs     uint
	MaxMemoryMiB uint64
	// Accel is kvm or tcg (resolved: never auto).
	Accel    string
	Emulator string
	// Disk is the per-VM overlay; nil for a diskless (kernel-only) VM.
	Disk *Disk
	// Boot is a direct kernel boot; nil boots from Disk.
	Boot    *KernelBoot
	Console Console
	// CIData is the cloud-init NoCloud volume (an ISO labelled cidata),
	// attached read-only as a CD-ROM; "" attaches none.
	CIData string
	// SharedMemory backs the guest's RAM with shared memory (memfd), which
	// virtio-fs needs (virtiofsd maps it): set when the VM has shares.
	SharedMemory bool
	// HugePageKiB backs the guest's RAM with huge pages of that size (the
	// pod's hugepage limit); 0: ordinary memory. Such a VM's RAM is not
	// resized (no virtio-mem device).
	HugePageKiB uint64
	// GenID gives the VM a VM generation ID device (vmgenid): a
	// template's, whose clones each get a new ID at their restore, on which
	// the guest's kernel reseeds its RNG.
	GenID bool
	// Identity is the uid and gid qemu runs as, the VM's own; nil runs it
	// as libvirt's qemu user (qemu.conf) with libvirt's relabelling.
	Identity *Identity
}

// Identity is a VM's own uid and gid. The domain gets a static DAC label
// with relabelling off: crimux has given the VM's own files to it, and
// what VMs share (an image's disk) stays root's and read-only.
type Identity struct {
	UID, GID uint32
}

// Disk is a disk image file of the VM.
type Disk struct {
	Path   string
	Format string // qcow2 or raw
	// Block: Path is a block device node (a root volume's), not a file.
	Block bool
	// Backing is the one file under Path (the image's disk), named in the
	// domain so libvirt never reads the chain from Path's header, which
	// qemu can write; nil names none (a disk without a backing file).
	Backing *Disk
}

// KernelBoot is a direct kernel boot.
type KernelBoot struct {
	Kernel, Initrd, Args string
}

// Console is the serial console: a unix socket qemu listens on (Attach) and
// the file qemu's chardev logs every byte to (copied into the CRI log).
type Console struct {
	Socket string
	Log    string
}

// Resources is the size of a VM.
type Resources struct {
	VCPUs     uint
	MemoryMiB uint64
	// HugePages, when asked, hold the guest's RAM: MemoryMiB is their
	// limit, and the memory limit is left to qemu's own memory.
	HugePages HugePages
}

// minShares is the CPU shares kubelet gives a container without a request.
const minShares = 2

// ResourcesFrom sizes a VM from the container's Linux resources: vCPUs
// from the CPU limit (quota/period, rounded up), else the request (shares
// /1024, rounded up), else 1; memory from the memory limit, which a VM must
// have, or, when the pod limits huge pages, from that limit.
func ResourcesFrom(r *runtimeapi.LinuxContainerResources) (Resources, error) {
	var out Resources
	switch {
	case r.GetCpuQuota() > 0 && r.GetCpuPeriod() > 0:
		out.VCPUs = uint(math.Ceil(float64(r.CpuQuota) / float64(r.CpuPeriod)))
	case r.GetCpuShares() > minShares:
		out.VCPUs = uint(math.Ceil(float64(r.CpuShares) / 1024))
	default:
		out.VCPUs = 1
	}
	if out.VCPUs > MaxVCPUs {
		return out, errdefs.Invalid("linux.resources.cpu_quota", "asks for %d vCPUs, more than %d", out.VCPUs, MaxVCPUs)
	}
	mem := r.GetMemoryLimitInBytes()
	if mem <= 0 {
		return out, errdefs.Invalid("linux.resources.memory_limit_in_bytes", "a VM needs a memory limit (its RAM size); set resources.limits.memory")
	}
	if mem < MinMemoryBytes {
		return out, errdefs.Invalid("linux.resources.memory_limit_in_bytes", "%d bytes is less than the %d MiB a VM needs", mem, MinMemoryBytes>>20)
	}
	out.MemoryMiB = uint64(mem) >> 20
	hp, err := HugePagesFrom(r)
	if err != nil || hp.PageKiB == 0 {
		return out, err
	}
	out.MemoryMiB, out.HugePages = hp.Bytes>>20, hp
	return out, nil
}

// Bounds of a VM's size.
const (
	MaxVCPUs       = 64
	MinMemoryBytes = 32 << 20
)

// Metadata is crimux's identity stamp inside the domain's <metadata>: what
// libvirt cannot tell crimux after a restart.
type Metadata struct {
	XMLName      xml.Name `xml:"https://crimux.io/xmlns/vm/1 crimux"`
	Instance     string   `xml:"instance"`
	PodUID       string   `xml:"pod>uid"`
	PodName      string   `xml:"pod>name"`
	PodNamespace string   `xml:"pod>namespace"`
	SandboxID    string   `xml:"sandbox-id"`
	ContainerID  string   `xml:"container-id"`
}

// DomainName is the libvirt name of a VM: stable, derived from the
// container ID, and recognisably crimux's.
func DomainName(containerID string) string {
	return fmt.Sprintf("crimux-%s", containerID)
}
