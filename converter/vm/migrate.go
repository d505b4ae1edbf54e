package vm

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/kubeapi"
)

// AnnotationMigrateFrom on a VM pod makes it the target of a live
// migration (issue 42): its VM is not booted; it arrives, running, from
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

// migrationDisks points the root disk (vda) at the target's overlay,
// whose top layer the migration fills, and the cloud-init CD-ROM at the
// target pod's volume. A VM booted from a kernel image may have neither.
func migrationDisks(d, t *libvirtxml.Domain) error {
	targets := map[string]string{}
	for _, disk := range devices(t).Disks {
		if disk.Target != nil && disk.Source != nil && disk.Source.File != nil {
			targets[disk.Target.Dev] = disk.Source.File.File
		}
	}
	for i := range devices(d).Disks {
		disk := &d.Devices.Disks[i]
		if disk.Target == nil || disk.Source == nil || disk.Source.File == nil || (disk.Target.Dev != "vda" && disk.Device != "cdrom") {
			return fmt.Errorf("the source has a disk that cannot move (%s)", diskName(disk))
		}
		path, ok := targets[disk.Target.Dev]
		if !ok {
			return fmt.Errorf("the source has %s, the target pod none", diskName(disk))
		}
		disk.Source.File.File = path
		if disk.Target.Dev == "vda" {
			disk.BackingStore = nil
		}
	}
	return nil
}

// MigrationDisks are the disks a migration copies: the root disk's top
// layer when the domain has one.
func MigrationDisks(source string) ([]string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(source); err != nil {
		return nil, err
	}
	for _, disk := range devices(&d).Disks {
		if disk.Target != nil && disk.Target.Dev == "vda" && disk.Source != nil && disk.Source.File != nil {
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
