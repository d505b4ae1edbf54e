package podnet

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
)

// IPv6 on the wire, for the router advertisements and the DHCPv6 answers
// crimux writes to the guest's tap itself (guest6.go): an Ethernet frame,
// an IPv6 header without extension headers, and ICMPv6 or UDP.
const (
	ethHeaderLen  = 14
	ipv6HeaderLen = 40
	etherTypeIPv6 = 0x86dd
	protoUDP      = 17
	protoICMPv6   = 58
)

// frame6 is an IPv6 packet in an Ethernet frame, as read off the tap.
type frame6 struct {
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.Addr
	NextHeader     uint8
	HopLimit       uint8
	Payload        []byte
}

var errNotIPv6 = errors.New("not an IPv6 frame")

// parseFrame6 reads an Ethernet frame carrying IPv6.
func parseFrame6(b []byte) (*frame6, error) {
	if len(b) < ethHeaderLen+ipv6HeaderLen || binary.BigEndian.Uint16(b[12:14]) != etherTypeIPv6 {
		return nil, errNotIPv6
	}
	ip := b[ethHeaderLen:]
	if ip[0]>>4 != 6 {
		return nil, errNotIPv6
	}
	n := int(binary.BigEndian.Uint16(ip[4:6]))
	if ipv6HeaderLen+n > len(ip) {
		return nil, errors.New("truncated IPv6 packet")
	}
	f := &frame6{
		DstMAC: net.HardwareAddr(b[0:6]), SrcMAC: net.HardwareAddr(b[6:12]),
		NextHeader: ip[6], HopLimit: ip[7],
		Src: netip.AddrFrom16([16]byte(ip[8:24])), Dst: netip.AddrFrom16([16]byte(ip[24:40])),
		Payload: ip[ipv6HeaderLen : ipv6HeaderLen+n],
	}
	return f, nil
}

// bytes is the frame on the wire.
func (f *frame6) bytes() []byte {
	b := make([]byte, ethHeaderLen+ipv6HeaderLen+len(f.Payload))
	copy(b[0:6], f.DstMAC)
	copy(b[6:12], f.SrcMAC)
	binary.BigEndian.PutUint16(b[12:14], etherTypeIPv6)
	ip := b[ethHeaderLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(f.Payload)))
	ip[6], ip[7] = f.NextHeader, f.HopLimit
	src, dst := f.Src.As16(), f.Dst.As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	copy(ip[ipv6HeaderLen:], f.Payload)
	return b
}

// udpDatagram is a UDP header and data, its checksum over the IPv6
// pseudo-header of src and dst.
func udpDatagram(src, dst netip.Addr, srcPort, dstPort uint16, data []byte) []byte {
	u := make([]byte, 8+len(data))
	binary.BigEndian.PutUint16(u[0:2], srcPort)
	binary.BigEndian.PutUint16(u[2:4], dstPort)
	binary.BigEndian.PutUint16(u[4:6], uint16(len(u)))
	copy(u[8:], data)
	sum := checksum6(src, dst, protoUDP, u)
	if sum == 0 {
		sum = 0xffff // 0 means "none", which IPv6 forbids
	}
	binary.BigEndian.PutUint16(u[6:8], sum)
	return u
}

// udpPorts splits a UDP datagram (nil data if it is too short).
func udpPorts(u []byte) (srcPort, dstPort uint16, data []byte) {
	if len(u) < 8 {
		return 0, 0, nil
	}
	return binary.BigEndian.Uint16(u[0:2]), binary.BigEndian.Uint16(u[2:4]), u[8:]
}

// checksum6 is the Internet checksum of an upper-layer packet with the
// IPv6 pseudo-header (RFC 8200, 8.1).
func checksum6(src, dst netip.Addr, proto uint8, payload []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	sum += uint32(len(payload)) + uint32(proto)
	add(payload)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// multicastMAC is the Ethernet address of an IPv6 multicast group.
func multicastMAC(group netip.Addr) net.HardwareAddr {
	a := group.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
