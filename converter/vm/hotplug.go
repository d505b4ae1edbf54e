package vm

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// MemoryBlockMiB is the virtio-mem device's block size: memory is plugged
// and unplugged in steps of it (2 MiB, the smallest x86 allows).
const MemoryBlockMiB = 2

// configureHotplug gives a VM room to grow while it runs (in-place
// resize): vCPUs up to s.MaxVCPUs, vCPU 0 fixed and every other one
// hot-pluggable (so a VM booted with 2 can go down to 1), and, when
// s.MaxMemoryMiB is above its RAM, a virtio-mem device of the difference
// on the VM's one NUMA node, nothing plugged at boot. The guest sees
// only what is plugged: a guest without virtio-mem just cannot grow.
func configureHotplug(s Spec, d *libvirtxml.Domain) error {
	if s.MaxVCPUs > s.VCPUs {
		if s.MaxVCPUs > MaxVCPUs {
			return fmt.Errorf("max vcpus %d over %d", s.MaxVCPUs, MaxVCPUs)
		}
		d.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Current: s.VCPUs, Value: s.MaxVCPUs}
		d.VCPUs = hotpluggableVCPUs(s.VCPUs, s.MaxVCPUs)
	}
	if s.MaxMemoryMiB <= s.MemoryMiB {
		return nil
	}
	room := s.MaxMemoryMiB - s.MemoryMiB
	room -= room % MemoryBlockMiB
	if room == 0 {
		return nil
	}
	cpus := max(s.MaxVCPUs, s.VCPUs)
	if d.CPU == nil {
		d.CPU = &libvirtxml.DomainCPU{}
	}
	zero := uint(0)
	cell := libvirtxml.DomainCell{ID: &zero, CPUs: fmt.Sprintf("0-%d", cpus-1), Memory: uint(s.MemoryMiB), Unit: "MiB"}
	if s.SharedMemory {
		cell.MemAccess = "shared"
	}
	d.CPU.Numa = &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{cell}}
	// libvirt counts <memory> as the boot RAM plus the device's size.
	d.MaximumMemory = &libvirtxml.DomainMaxMemory{Value: uint(s.MemoryMiB + room), Unit: "MiB", Slots: 1}
	d.Memory = &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB + room), Unit: "MiB"}
	dev := MemoryDevice(room, 0)
	devices(d).Memorydevs = append(devices(d).Memorydevs, *dev)
	return nil
}

// hotpluggableVCPUs lists vCPUs 0..max-1: 0 enabled and fixed, the first
// current enabled, all but 0 hot-pluggable.
func hotpluggableVCPUs(current, maxVCPUs uint) *libvirtxml.DomainVCPUs {
	out := &libvirtxml.DomainVCPUs{}
	for i := range maxVCPUs {
		id := i
		v := libvirtxml.DomainVCPUsVCPU{Id: &id, Enabled: "no", Hotpluggable: "yes"}
		if i < current {
			order := i + 1
			v.Enabled, v.Order = "yes", &order
		}
		if i == 0 {
			v.Hotpluggable = "no"
		}
		out.VCPU = append(out.VCPU, v)
	}
	return out
}

// MemoryDevice is the VM's virtio-mem device of sizeMiB with requestedMiB
// plugged: what a memory resize sends libvirt (update-memory-device).
func MemoryDevice(sizeMiB, requestedMiB uint64) *libvirtxml.DomainMemorydev {
	return &libvirtxml.DomainMemorydev{
		Model: "virtio-mem",
		Target: &libvirtxml.DomainMemorydevTarget{
			Size:      &libvirtxml.DomainMemorydevTargetSize{Value: uint(sizeMiB), Unit: "MiB"},
			Node:      &libvirtxml.DomainMemorydevTargetNode{Value: 0},
			Block:     &libvirtxml.DomainMemorydevTargetBlock{Value: MemoryBlockMiB, Unit: "MiB"},
			Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: uint(requestedMiB), Unit: "MiB"},
		},
	}
}
