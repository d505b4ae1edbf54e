package libvirtdirect

import (
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
)

// domainXML is the domain crimux would define for spec, with a NIC when
// nic is set.
func (d *Client) domainXML(spec vm.Spec, nic bool) (string, error) {
	dom, err := vm.Domain(spec)
	if err != nil {
		return "", err
	}
	if nic {
		dom.Devices.Interfaces = append(dom.Devices.Interfaces, nicOf())
	}
	return dom.Marshal()
}

// nicOf is the direct path's NIC: what crimux hands a VM pod's qemu (a
// virtio-net device at PCI slot 0x1e on a tap, vhost off), here on a tap
// libvirtd makes (an ethernet interface, on no bridge: the guest's DHCP,
// which it starts after its boot marker, gets no answer).
func nicOf() libvirtxml.DomainInterface {
	zero, slot := uint(0), uint(0x1e)
	return libvirtxml.DomainInterface{
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		Driver: &libvirtxml.DomainInterfaceDriver{Name: "qemu"},
		Address: &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{
			Domain: &zero, Bus: &zero, Slot: &slot, Function: &zero}},
	}
}
