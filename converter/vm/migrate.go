package vm

import (
	"fmt"
	"path"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/kubeapi"
)

// AnnotationMigrateFrom on a VM pod makes it the target of a live
// migration: its VM is not booted; it arrives, running, from
// the pod the value names (namespace/name, or a container ID at the CRI
// level), and until then its container runs with no qemu.
const AnnotationMigrateFrom = kubeapi.AnnotationMigrateFrom

// maxMigrateFrom bounds the annotation: a namespace, a slash and a name.
const maxMigrateFrom = 253 + 1 + 253

// MigrationXML is the domain a migrating VM becomes on its target: the
// source's migratable definition (its name and UUID, machine and
// devices, which libvirt's checks compare) with what is the target pod's
// own, taken from the domain crimux defined for it (target): its metadata,
// qemu identity, root disk, cloud-init volume and console, and all that
// reaches the host (migrate_guard.go: the source's may come from a
// tenant). The root
// disk's backing chain is left for the target's libvirt to read from the
// target's overlay (the image's base has another path there).
func MigrationXML(source, target string) (string, error) {
	var d, t libvirtxml.Domain
	if err := d.Unmarshal(source); err != nil {
		return "", fmt.Errorf("the source's domain: %w", err)
	}
	if err := t.Unmarshal(target); err != nil {
		return "", fmt.Errorf("the target's domain: %w", err)
	}
	if d.UUID == "" || t.Name == "" {
		return "", fmt.Errorf("the source's domain has no UUID, or the target's no name")
	}
	if err := sameShape(&d, &t); err != nil {
		return "", err
	}
	hostFromTarget(&d, &t)
	// The name stays the source's: libvirt renames the domain on the
	// target (its destination_name), and checks the XML's against the
	// source's first.
	d.ID, d.Metadata, d.SecLabel = nil, t.Metadata, t.SecLabel
	if err := migrationDisks(&d, &t); err != nil {
		return "", fmt.Errorf("migrate to %s: %w", t.Name, err)
	}
	if d.Devices != nil && t.Devices != nil {
		d.Devices.Serials, d.Devices.Consoles = t.Devices.Serials, t.Devices.Consoles
	}
	if err := cloneAgent(&d, CloneSpec{}); err != nil {
		return "", err
	}
	return d.Marshal()
}

// migrationDisks points the root disk (vda) at the target's, and the
// cloud-init CD-ROM at the target pod's volume. A root disk on a volume
// (a durable VM) must arrive on a volume, shared, and an overlay, whose
// top layer the migration fills, on an overlay. A VM booted from a
// kernel image may have neither.
func migrationDisks(d, t *libvirtxml.Domain) error {
	targets := map[string]*libvirtxml.DomainDisk{}
	for i, disk := range devices(t).Disks {
		if disk.Target != nil && diskPath(&disk) != "" {
			targets[disk.Target.Dev] = &devices(t).Disks[i]
		}
	}
	for i := range devices(d).Disks {
		disk := &d.Devices.Disks[i]
		if disk.Target == nil || diskPath(disk) == "" || (disk.Target.Dev != "vda" && disk.Device != "cdrom") {
			return fmt.Errorf("the source has a disk that cannot move (%s)", diskName(disk))
		}
		own, ok := targets[disk.Target.Dev]
		if !ok {
			return fmt.Errorf("the source has %s, the target pod none", diskName(disk))
		}
		if disk.Device == "cdrom" {
			if disk.Source.File == nil || own.Source.File == nil {
				return fmt.Errorf("the source's or the target pod's %s is not a file", diskName(disk))
			}
			disk.Source.File.File = own.Source.File.File
			continue
		}
		if err := sameRootKind(disk, own); err != nil {
			return err
		}
		disk.Source = own.Source
		disk.BackingStore = nil // the overlay's base has another path there
		if onVolume(own) {
			disk.BackingStore = own.BackingStore // crimux's: none
		}
	}
	return nil
}

// sameRootKind refuses a root disk that would change kind on the way: a
// volume's is shared and not copied, an overlay's copied.
func sameRootKind(src, own *libvirtxml.DomainDisk) error {
	switch {
	case onVolume(src) && !onVolume(own):
		return fmt.Errorf("the source VM's root disk is a volume (%s), the target pod's is not: name the same volume in the target pod", RootVolumeFile)
	case !onVolume(src) && onVolume(own):
		return fmt.Errorf("the target pod's root disk is a volume, the source VM's is not (it is copied, not shared)")
	case src.Source.File == nil && !onVolume(src):
		return fmt.Errorf("the source has a disk that cannot move (%s)", diskName(src))
	}
	return nil
}

// RootVolumeFile is the file in a VM's directory through which its qemu
// reaches a root volume's disk (runtimes/libvirt/rootvol).
const RootVolumeFile = "root-volume"

// onVolume says whether disk is a root volume's: shared storage, which a
// migration leaves where it is.
func onVolume(disk *libvirtxml.DomainDisk) bool {
	return path.Base(diskPath(disk)) == RootVolumeFile
}

// diskPath is a disk's file or block device, "" for another source.
func diskPath(disk *libvirtxml.DomainDisk) string {
	switch {
	case disk.Source == nil:
		return ""
	case disk.Source.File != nil:
		return disk.Source.File.File
	case disk.Source.Block != nil:
		return disk.Source.Block.Dev
	}
	return ""
}

// MigrationDisks are the disks a migration copies: the root disk's top
// layer when the domain has one on the node's own storage; none for a
// root disk on a volume, which both nodes reach.
func MigrationDisks(source string) ([]string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(source); err != nil {
		return nil, err
	}
	for _, disk := range devices(&d).Disks {
		if disk.Target != nil && disk.Target.Dev == "vda" && diskPath(&disk) != "" && !onVolume(&disk) {
			return []string{"vda"}, nil
		}
	}
	return nil, nil
}

// sameShape refuses a target pod whose VM is not the source's size: the
// VM would arrive with more than its pod and cgroup were made for.
func sameShape(d, t *libvirtxml.Domain) error {
	type shape struct {
		vcpus             uint
		memoryKiB, maxKiB uint64
	}
	of := func(x *libvirtxml.Domain) shape {
		var s shape
		if x.VCPU != nil {
			s.vcpus = x.VCPU.Value
		}
		s.memoryKiB = memoryKiB(x.Memory)
		if x.MaximumMemory != nil {
			s.maxKiB = scaledKiB(uint64(x.MaximumMemory.Value), x.MaximumMemory.Unit)
		}
		return s
	}
	src, dst := of(d), of(t)
	if src != dst {
		return fmt.Errorf("the source VM has %d vCPUs and %d MiB (up to %d MiB), the target pod %d and %d MiB (up to %d MiB): they must match",
			src.vcpus, src.memoryKiB>>10, src.maxKiB>>10, dst.vcpus, dst.memoryKiB>>10, dst.maxKiB>>10)
	}
	return nil
}

func memoryKiB(m *libvirtxml.DomainMemory) uint64 {
	if m == nil {
		return 0
	}
	return scaledKiB(uint64(m.Value), m.Unit)
}

// scaledKiB is a libvirt memory size in KiB (its default unit).
func scaledKiB(v uint64, unit string) uint64 {
	switch unit {
	case "b", "bytes":
		return v >> 10
	case "M", "MiB":
		return v << 10
	case "G", "GiB":
		return v << 20
	}
	return v
}
