package libvirtdirect

import (
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
)

// domainXML is the domain crimux would define for spec, with a NIC when
// the shape has one.
func (d *Client) domainXML(spec vm.Spec, sh Shape) (string, error) {
	dom, err := vm.Domain(spec)
	if err != nil {
		return "", err
	}
	if sh.NIC {
		dom.Devices.Interfaces = append(dom.Devices.Interfaces, nicOf(sh.MAC))
	}
	return dom.Marshal()
}

// nicOf is the direct path's NIC: what crimux hands a VM pod's qemu (a
// virtio-net device at PCI slot 0x1e on a tap, vhost off), here on a tap
// libvirtd makes (an ethernet interface, on no bridge: the guest's DHCP,
// which it starts after its boot marker, gets no answer; a guest given
// static addressing, as cloud-init gives crimux's, waits for nothing).
func nicOf(mac string) libvirtxml.DomainInterface {
	zero, slot := uint(0), uint(0x1e)
	var m *libvirtxml.DomainInterfaceMAC
	if mac != "" {
		m = &libvirtxml.DomainInterfaceMAC{Address: mac}
	}
	return libvirtxml.DomainInterface{
		MAC:    m,
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		Driver: &libvirtxml.DomainInterfaceDriver{Name: "qemu"},
		Address: &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{
			Domain: &zero, Bus: &zero, Slot: &slot, Function: &zero}},
	}
}
