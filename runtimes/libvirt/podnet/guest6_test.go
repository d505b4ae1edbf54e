package podnet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

var (
	testGuestMAC  = net.HardwareAddr{0x02, 0x42, 0x0a, 0x58, 0x4d, 0x05}
	testBridgeMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	testGuestLL   = netip.MustParseAddr("fe80::42:aff:fe58:4d05")
)

func testAdvert(router bool) *advert {
	return &advert{
		Prefix: netip.MustParsePrefix("fd00:88:77::/64"), Router: router, MTU: 1450, MAC: testBridgeMAC,
		DNS: []netip.Addr{netip.MustParseAddr("fd00:96::a")}, Search: []string{"ns.svc.cluster.local"},
	}
}

func testLease6() *Lease6 {
	return &Lease6{IP: net.ParseIP("fd00:88:77::5"), DNS: []net.IP{net.ParseIP("fd00:96::a")},
		Search: []string{"ns.svc.cluster.local"}, ServerMAC: testBridgeMAC}
}

// fromGuest is a frame the guest sends.
func fromGuest(dst netip.Addr, dstMAC net.HardwareAddr, next uint8, payload []byte) []byte {
	f := &frame6{SrcMAC: testGuestMAC, DstMAC: dstMAC, Src: testGuestLL, Dst: dst, NextHeader: next, HopLimit: 255, Payload: payload}
	return f.bytes()
}

// parseAnswer reads back a frame crimux sends, checking what any guest
// would check first: IPv6 to the guest's MAC, a valid checksum.
func parseAnswer(t *testing.T, b []byte, dstMAC net.HardwareAddr) *frame6 {
	t.Helper()
	f, err := parseFrame6(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.DstMAC.String() != dstMAC.String() || f.SrcMAC.String() != testBridgeMAC.String() || f.Src != routerLinkLocal || f.HopLimit != 255 {
		t.Fatalf("frame %+v", f)
	}
	if sum := checksum6(f.Src, f.Dst, f.NextHeader, f.Payload); sum != 0 {
		t.Fatalf("checksum does not verify (%#x)", sum)
	}
	return f
}

// TestRouterAdvertisement: the prefix on link without autoconfiguration,
// addresses from DHCPv6 (M and O), MTU, DNS; crimux the default router
// only when the pod has an IPv6 gateway; answered to the soliciting
// guest alone, or to all nodes for a guest without an address yet.
func TestRouterAdvertisement(t *testing.T) {
	for _, router := range []bool{true, false} {
		rs, _ := ndp.MarshalMessageChecksum(&ndp.RouterSolicitation{}, testGuestLL, netip.MustParseAddr("ff02::2"))
		f, err := parseFrame6(fromGuest(netip.MustParseAddr("ff02::2"), multicastMAC(netip.MustParseAddr("ff02::2")), protoICMPv6, rs))
		if err != nil {
			t.Fatal(err)
		}
		out, err := answer6(f, testAdvert(router), testLease6())
		if err != nil {
			t.Fatal(err)
		}
		a := parseAnswer(t, out, testGuestMAC)
		msg, err := ndp.ParseMessage(a.Payload)
		if err != nil {
			t.Fatal(err)
		}
		ra := msg.(*ndp.RouterAdvertisement)
		wantLife := time.Duration(0)
		if router {
			wantLife = routerLifetime
		}
		if a.Dst != testGuestLL || !ra.ManagedConfiguration || !ra.OtherConfiguration || ra.RouterLifetime != wantLife {
			t.Fatalf("advertisement %+v to %s", ra, a.Dst)
		}
		var prefix *ndp.PrefixInformation
		var dns *ndp.RecursiveDNSServer
		var mtu *ndp.MTU
		for _, o := range ra.Options {
			switch o := o.(type) {
			case *ndp.PrefixInformation:
				prefix = o
			case *ndp.RecursiveDNSServer:
				dns = o
			case *ndp.MTU:
				mtu = o
			}
		}
		if prefix == nil || prefix.Prefix.String() != "fd00:88:77::" || prefix.PrefixLength != 64 || !prefix.OnLink ||
			prefix.AutonomousAddressConfiguration || dns == nil || dns.Servers[0].String() != "fd00:96::a" || mtu == nil || mtu.MTU != 1450 {
			t.Fatalf("options %+v", ra.Options)
		}
	}
	// From the unspecified address (before the guest's own is ready).
	f := &frame6{SrcMAC: testGuestMAC, Src: netip.IPv6Unspecified(), Dst: netip.MustParseAddr("ff02::2"), NextHeader: protoICMPv6, Payload: []byte{133, 0, 0, 0, 0, 0, 0, 0}}
	out, err := answer6(f, testAdvert(true), testLease6())
	if err != nil {
		t.Fatal(err)
	}
	if a := parseAnswer(t, out, multicastMAC(allNodes)); a.Dst != allNodes {
		t.Fatalf("answer to %s", a.Dst)
	}
}

// dhcp6Exchange sends msg from the guest and returns crimux's answer
// (nil: none).
func dhcp6Exchange(t *testing.T, msg *dhcpv6.Message) *dhcpv6.Message {
	t.Helper()
	dst := netip.MustParseAddr("ff02::1:2")
	u := udpDatagram(testGuestLL, dst, dhcp6ClientPort, dhcp6ServerPort, msg.ToBytes())
	f, err := parseFrame6(fromGuest(dst, multicastMAC(dst), protoUDP, u))
	if err != nil {
		t.Fatal(err)
	}
	out, err := answer6(f, testAdvert(true), testLease6())
	if err != nil || out == nil {
		if err != nil {
			t.Fatal(err)
		}
		return nil
	}
	a := parseAnswer(t, out, testGuestMAC)
	src, dstPort, data := udpPorts(a.Payload)
	if a.Dst != testGuestLL || src != dhcp6ServerPort || dstPort != dhcp6ClientPort {
		t.Fatalf("answer to %s:%d from port %d", a.Dst, dstPort, src)
	}
	d, err := dhcpv6.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return d.(*dhcpv6.Message)
}

// TestDHCPv6: Solicit, Advertise, Request, Reply: the pod's IPv6 address
// in the client's IA_NA, forever, with the DNS servers and search list;
// a Request for another server is not answered.
func TestDHCPv6(t *testing.T) {
	sol, err := dhcpv6.NewSolicit(testGuestMAC)
	if err != nil {
		t.Fatal(err)
	}
	adv := dhcp6Exchange(t, sol)
	checkIANA := func(m *dhcpv6.Message, typ dhcpv6.MessageType) {
		t.Helper()
		ia := m.Options.OneIANA()
		if m.Type() != typ || ia == nil || ia.IaId != sol.Options.OneIANA().IaId {
			t.Fatalf("%s: %s", typ, m.Summary())
		}
		addr := ia.Options.OneAddress()
		if addr == nil || !addr.IPv6Addr.Equal(net.ParseIP("fd00:88:77::5")) || addr.ValidLifetime != infiniteLifetime ||
			len(m.Options.DNS()) != 1 || m.Options.DomainSearchList() == nil {
			t.Fatalf("%s: %s", typ, m.Summary())
		}
	}
	checkIANA(adv, dhcpv6.MessageTypeAdvertise)
	req, err := dhcpv6.NewRequestFromAdvertise(adv)
	if err != nil {
		t.Fatal(err)
	}
	checkIANA(dhcp6Exchange(t, req), dhcpv6.MessageTypeReply)
	other := &Lease6{ServerMAC: net.HardwareAddr{2, 9, 9, 9, 9, 9}}
	req.UpdateOption(dhcpv6.OptServerID(other.serverID()))
	if m := dhcp6Exchange(t, req); m != nil {
		t.Fatalf("answered a Request for another server: %s", m.Summary())
	}
}

// TestGuest6Filter: the socket on the tap reads router solicitations and
// DHCPv6 requests only.
func TestGuest6Filter(t *testing.T) {
	vm, err := bpf.NewVM(guest6Filter)
	if err != nil {
		t.Fatal(err)
	}
	rs := fromGuest(netip.MustParseAddr("ff02::2"), multicastMAC(netip.MustParseAddr("ff02::2")), protoICMPv6, []byte{133, 0, 0, 0, 0, 0, 0, 0})
	ra := fromGuest(allNodes, multicastMAC(allNodes), protoICMPv6, []byte{134, 0, 0, 0, 0, 0, 0, 0})
	dst := netip.MustParseAddr("ff02::1:2")
	sol := fromGuest(dst, multicastMAC(dst), protoUDP, udpDatagram(testGuestLL, dst, 546, 547, []byte{1, 0, 0, 1}))
	dns := fromGuest(dst, multicastMAC(dst), protoUDP, udpDatagram(testGuestLL, dst, 40000, 53, []byte{0}))
	tcp := fromGuest(dst, testBridgeMAC, 6, make([]byte, 20))
	v4 := append([]byte{}, rs...)
	v4[12], v4[13] = 0x08, 0x00
	for name, tc := range map[string]struct {
		frame []byte
		keep  bool
	}{
		"RS": {rs, true}, "DHCPv6": {sol, true},
		"RA": {ra, false}, "DNS": {dns, false}, "TCP": {tcp, false}, "IPv4": {v4, false},
	} {
		n, err := vm.Run(tc.frame)
		if err != nil || (n > 0) != tc.keep {
			t.Errorf("%s: filter returned %d (%v), keep = %v", name, n, err, tc.keep)
		}
	}
}
