package vm

import (
	"encoding/xml"
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// A clone is restored from a template's save image: qemu loads
// the template's device state into it, so its domain is the template's as
// libvirt saved it (the machine, every device and its PCI address, vCPUs,
// memory) with only what makes it a VM of its own changed: its name and
// UUID, crimux's stamp, the identity qemu runs as, its own root disk
// (a copy of the template's overlay), the pod's cloud-init volume and its
// console's files. Its MAC address and virtual hardware are the
// template's, as qemu's saved state has them; the VM generation ID is new
// at every restore (libvirt makes one).

// CloneSpec is what a clone gets of its own.
type CloneSpec struct {
	Name, UUID string
	Meta       Metadata
	// Identity is the uid and gid its qemu runs as (nil: libvirt's user).
	Identity *Identity
	// Disk is the clone's root disk: the path of its copy of the
	// template's overlay, which keeps the overlay's backing chain.
	Disk string
	// CIData is the pod's cloud-init volume ("" keeps none: the template
	// had none either).
	CIData  string
	Console Console
}

// CloneXML is the domain XML of a clone of the template whose saved XML
// is template.
func CloneXML(template string, c CloneSpec) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(template); err != nil {
		return "", fmt.Errorf("clone %s: the template's domain: %w", c.Name, err)
	}
	if c.Name == "" || c.UUID == "" || c.Disk == "" || c.Console.Socket == "" || c.Console.Log == "" {
		return "", fmt.Errorf("clone %q: name, UUID, disk and console paths must be set", c.Name)
	}
	d.Name, d.UUID, d.ID = c.Name, c.UUID, nil
	meta, err := xml.Marshal(c.Meta)
	if err != nil {
		return "", err
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: string(meta)}
	d.SecLabel = nil
	if err := configureIdentity(Spec{Identity: c.Identity}, &d); err != nil {
		return "", fmt.Errorf("clone %s: %w", c.Name, err)
	}
	for _, set := range []func(*libvirtxml.Domain, CloneSpec) error{cloneDisks, cloneConsole, cloneAgent} {
		if err := set(&d, c); err != nil {
			return "", fmt.Errorf("clone %s: %w", c.Name, err)
		}
	}
	return d.Marshal()
}

// cloneDisks points the root disk (vda) at the clone's copy and the
// cloud-init CD-ROM (hdc) at the pod's volume.
func cloneDisks(d *libvirtxml.Domain, c CloneSpec) error {
	var root, cidata bool
	for i := range devices(d).Disks {
		disk := &d.Devices.Disks[i]
		switch {
		case disk.Target != nil && disk.Target.Dev == "vda" && disk.Source != nil && disk.Source.File != nil:
			disk.Source.File.File, root = c.Disk, true
		case disk.Device == "cdrom" && disk.Source != nil && disk.Source.File != nil:
			if c.CIData == "" {
				return fmt.Errorf("the template has a cloud-init volume, the pod none")
			}
			disk.Source.File.File, cidata = c.CIData, true
		default:
			return fmt.Errorf("the template has a disk a clone cannot be given (%s)", diskName(disk))
		}
	}
	if !root {
		return fmt.Errorf("the template has no root disk file (vda)")
	}
	if c.CIData != "" && !cidata {
		return fmt.Errorf("the pod has a cloud-init volume, the template none")
	}
	return nil
}

func diskName(disk *libvirtxml.DomainDisk) string {
	if disk.Target != nil {
		return disk.Device + " " + disk.Target.Dev
	}
	return disk.Device
}

// cloneConsole gives the clone its console's socket and log.
func cloneConsole(d *libvirtxml.Domain, c CloneSpec) error {
	serials := devices(d).Serials
	if len(serials) != 1 || serials[0].Source == nil || serials[0].Source.UNIX == nil || serials[0].Log == nil {
		return fmt.Errorf("the template's console is not crimux's (one serial port on a socket, logged)")
	}
	serials[0].Source.UNIX.Path, serials[0].Log.File = c.Console.Socket, c.Console.Log
	// libvirt lists the serial port as the console too: the same device.
	for i := range d.Devices.Consoles {
		if con := &d.Devices.Consoles[i]; con.Source != nil && con.Source.UNIX != nil {
			con.Source.UNIX.Path = c.Console.Socket
			if con.Log != nil {
				con.Log.File = c.Console.Log
			}
		}
	}
	return nil
}

// cloneAgent leaves the agent channel's socket to libvirt, which names
// one per domain (the template's path is its own).
func cloneAgent(d *libvirtxml.Domain, _ CloneSpec) error {
	for i := range devices(d).Channels {
		ch := &d.Devices.Channels[i]
		if ch.Source != nil && ch.Source.UNIX != nil {
			ch.Source.UNIX.Path = ""
		}
	}
	return nil
}
