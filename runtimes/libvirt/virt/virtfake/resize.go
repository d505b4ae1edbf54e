package virtfake

import (
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// SetVCPUs records the count in the definition and, live, in the running
// domain (which it must be); an unplug times out if UnplugTimesOut.
func (f *Libvirt) SetVCPUs(h virt.Domain, n uint, live bool) error {
	return f.power("SetVCPUs", h, func(d *Domain) error {
		if live && !d.State.Active() {
			return invalid("domain is not running")
		}
		if live && d.UnplugTimesOut && n < d.LiveVCPUs {
			return fmt.Errorf("vcpu unplug request timed out. Unplug result must be manually inspected in the domain: %w", errdefs.ErrUnavailable)
		}
		if live {
			d.LiveVCPUs = n
		}
		d.VCPUs = n
		return nil
	})
}

// RequestMemory sets the virtio-mem device's requested size; the device
// (its size) comes from the domain's XML, which must have one, as
// libvirt's. The guest plugs it at once if GuestPlugs, else nothing
// changes in it.
func (f *Libvirt) RequestMemory(h virt.Domain, requestedMiB uint64, live bool) error {
	return f.power("RequestMemory", h, func(d *Domain) error {
		if live && !d.State.Active() {
			return invalid("domain is not running")
		}
		size, err := memoryDeviceSize(d.XML)
		if err != nil {
			return err
		}
		if requestedMiB > size {
			return invalid("requested size above the device's")
		}
		d.Memory.SizeMiB, d.Memory.RequestedMiB = size, requestedMiB
		if d.GuestPlugs {
			d.Memory.CurrentMiB = requestedMiB
		}
		return nil
	})
}

func memoryDeviceSize(domainXML string) (uint64, error) {
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(domainXML); err != nil || dom.Devices == nil {
		return 0, invalid("memory not found")
	}
	for _, m := range dom.Devices.Memorydevs {
		if m.Model == "virtio-mem" && m.Target != nil && m.Target.Size != nil && m.Target.Size.Unit == "MiB" {
			return uint64(m.Target.Size.Value), nil
		}
	}
	return 0, invalid("memory not found")
}

// PluggedMemory is the device as RequestMemory left it; a domain never
// asked has none.
func (f *Libvirt) PluggedMemory(h virt.Domain) (virt.MemoryPlug, bool, error) {
	var p virt.MemoryPlug
	var ok bool
	err := f.power("PluggedMemory", h, func(d *Domain) error {
		p, ok = d.Memory, d.Memory.SizeMiB > 0
		return nil
	})
	return p, ok, err
}

// GuestMemory is the domain's GuestMemory while it runs; nothing (ok
// false) when it has none or is not running.
func (f *Libvirt) GuestMemory(h virt.Domain) (virt.GuestMemory, bool, error) {
	var m virt.GuestMemory
	var ok bool
	err := f.power("GuestMemory", h, func(d *Domain) error {
		if d.GuestMemory != nil && d.State.Active() {
			m, ok = *d.GuestMemory, true
		}
		return nil
	})
	return m, ok, err
}

// IO is the domain's IO while it runs; zero when it is not running.
func (f *Libvirt) IO(h virt.Domain) (virt.IO, error) {
	var io virt.IO
	err := f.power("IO", h, func(d *Domain) error {
		if d.State.Active() {
			io = d.IO
		}
		return nil
	})
	return io, err
}
