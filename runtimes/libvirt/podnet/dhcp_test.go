package podnet

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	guestMAC, _ = net.ParseMAC("52:54:00:12:34:56")
	testLease   = &Lease{
		MAC: guestMAC, IP: net.ParseIP("10.88.77.9").To4(), Mask: net.CIDRMask(24, 32),
		Gateway: net.ParseIP("10.88.77.1").To4(), MTU: 1450, Hostname: "web-0",
		DNS: []net.IP{net.ParseIP("10.96.0.10").To4()}, Search: []string{"default.svc.cluster.local"},
		ServerID: net.ParseIP(serverIP).To4(),
	}
)

func request(t *testing.T, typ dhcpv4.MessageType, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(mac, append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLeaseOffersAndAcksThePodAddress(t *testing.T) {
	for _, tc := range []struct {
		in, want dhcpv4.MessageType
	}{
		{dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeOffer},
		{dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeAck},
	} {
		req := request(t, tc.in, guestMAC, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(testLease.IP)))
		resp, err := testLease.reply(req)
		if err != nil || resp == nil {
			t.Fatalf("%s: reply = %v, %v", tc.in, resp, err)
		}
		// On the wire and back, as the guest reads it.
		got, err := dhcpv4.FromBytes(resp.ToBytes())
		if err != nil {
			t.Fatal(err)
		}
		if got.MessageType() != tc.want || !got.YourIPAddr.Equal(testLease.IP) || got.TransactionID != req.TransactionID {
			t.Fatalf("%s: got %s yiaddr %s xid %s", tc.in, got.MessageType(), got.YourIPAddr, got.TransactionID)
		}
		if m := got.SubnetMask(); m.String() != net.CIDRMask(24, 32).String() {
			t.Errorf("mask = %s", m)
		}
		if r := got.Router(); len(r) != 1 || !r[0].Equal(testLease.Gateway) {
			t.Errorf("router = %v", r)
		}
		if d := got.DNS(); len(d) != 1 || !d[0].Equal(testLease.DNS[0]) {
			t.Errorf("dns = %v", d)
		}
		if got.HostName() != "web-0" || !got.ServerIdentifier().Equal(testLease.ServerID) {
			t.Errorf("hostname %q server id %s", got.HostName(), got.ServerIdentifier())
		}
		if lt := got.IPAddressLeaseTime(0); lt != infiniteLease {
			t.Errorf("lease time = %s, want infinite", lt)
		}
		if mtu := got.Options.Get(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != 1450 {
			t.Errorf("mtu option = %v", mtu)
		}
		if sl := got.DomainSearch(); sl == nil || len(sl.Labels) != 1 || sl.Labels[0] != "default.svc.cluster.local" {
			t.Errorf("search = %v", sl)
		}
	}
}

func TestLeaseRefusesOtherAddressesAndStaysSilentForStrangers(t *testing.T) {
	other := net.ParseIP("10.88.77.200").To4()
	resp, err := testLease.reply(request(t, dhcpv4.MessageTypeRequest, guestMAC, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(other))))
	if err != nil || resp == nil || resp.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("request for another address: %v, %v; want a NAK", resp, err)
	}
	stranger, _ := net.ParseMAC("52:54:00:ff:ff:ff")
	for _, req := range []*dhcpv4.DHCPv4{
		request(t, dhcpv4.MessageTypeDiscover, stranger),
		request(t, dhcpv4.MessageTypeRelease, guestMAC),
		request(t, dhcpv4.MessageTypeInform, guestMAC),
	} {
		if resp, err := testLease.reply(req); resp != nil || err != nil {
			t.Errorf("%s from %s: answered %v, %v", req.MessageType(), req.ClientHWAddr, resp, err)
		}
	}
}

func TestLeaseClasslessRoutes(t *testing.T) {
	l := *testLease
	l.Routes = []Route{{Dst: "0.0.0.0/0"}}
	if r := l.classless(); r != nil {
		t.Fatalf("a default route alone needs no option 121: %v", r)
	}
	l.Routes = []Route{{Dst: "0.0.0.0/0"}, {Dst: "10.96.0.0/12", GW: "10.88.77.254"}}
	r := l.classless()
	if len(r) != 2 || r[0].Router.String() != "10.88.77.1" || r[1].Dest.String() != "10.96.0.0/12" || r[1].Router.String() != "10.88.77.254" {
		t.Fatalf("routes = %v", r)
	}
	resp, err := l.reply(request(t, dhcpv4.MessageTypeDiscover, guestMAC))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ClasslessStaticRoute(); len(got) != 2 {
		t.Fatalf("option 121 = %v", got)
	}
}

func TestEchoFilterDropsHairpinRepeats(t *testing.T) {
	var f echoFilter
	d := request(t, dhcpv4.MessageTypeDiscover, guestMAC)
	if f.repeat(d) || !f.repeat(d) {
		t.Fatal("the first DISCOVER must pass and its echo must not")
	}
	r, _ := dhcpv4.NewRequestFromOffer(d)
	if f.repeat(r) {
		t.Fatal("the REQUEST after a DISCOVER is no repeat")
	}
	f.at = f.at.Add(-2 * echoWindow) // the client retransmits later
	if f.repeat(r) {
		t.Fatal("a retransmission was taken for an echo")
	}
}
