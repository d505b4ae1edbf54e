package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestIntegrationPodNetworkIPv6: a dual-stack and an IPv6-only pod
// network with the real plugins: every address recorded, none left in the
// pod's namespace but crimux's link-local one, the namespace routing to
// the IPv6 gateway, and a "guest" on the tap gets a router advertisement
// and its address over DHCPv6 (and, dual stack, its IPv4 one over DHCP).
func TestIntegrationPodNetworkIPv6(t *testing.T) {
	// The bridge plugin turns the node's IPv6 forwarding on for an IPv6
	// gateway: as it was afterwards.
	if was, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding"); err == nil {
		t.Cleanup(func() { _ = os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", was, 0o644) })
	}
	for _, tc := range []struct {
		name, bridge, ranges, routes, v4, v6 string
	}{
		{"dual stack", "crimuxpn1", `[[{"subnet":"10.99.89.0/24"}],[{"subnet":"fd00:99:89::/64"}]]`,
			`[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`, "10.99.89.", "fd00:99:89::"},
		{"IPv6 only", "crimuxpn2", `[[{"subnet":"fd00:99:90::/64"}]]`, `[{"dst":"::/0"}]`, "", "fd00:99:90::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := integrationManagerOn(t, tc.bridge, tc.ranges, tc.routes)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pod := &Pod{SandboxID: "0123456789abcde6", Namespace: "default", Name: "vm-it6", UID: "uid-it6",
				Hostname: "vm-it6", DNS: []string{"10.96.0.10", "fd00:96::a"}}
			a, err := m.Plan(pod.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Teardown(context.Background(), pod, a) })
			if err := m.Setup(ctx, pod, a); err != nil {
				t.Fatal(err)
			}
			v4, has4 := a.IPv4()
			v6, has6 := a.IPv6()
			if has4 != (tc.v4 != "") || (has4 && (a.IP != v4.IP || !hasPrefix(v4.IP, tc.v4))) ||
				!has6 || !hasPrefix(v6.IP, tc.v6) || v6.PrefixLen != 64 || v6.Gateway != tc.v6+"1" {
				t.Fatalf("attachment = %+v", a)
			}
			checkWiring(t, a)
			checkWiring6(t, a, v6.Gateway)
			if err := m.StartDHCP(pod, a); err != nil {
				t.Fatal(err)
			}
			tap, err := m.OpenTap(a)
			if err != nil {
				t.Fatal(err)
			}
			defer tap.Close()
			mac, _ := net.ParseMAC(a.GuestMAC)
			if has4 {
				if offer := dhcpThroughTap(t, tap, a.GuestMAC); !offer.YourIPAddr.Equal(net.ParseIP(v4.IP)) {
					t.Fatalf("DHCP offer %s, want %s", offer.YourIPAddr, v4.IP)
				}
			}
			ra := routerAdvertThroughTap(t, tap, mac)
			if !ra.ManagedConfiguration || ra.RouterLifetime == 0 {
				t.Fatalf("router advertisement %+v", ra)
			}
			adv := dhcp6ThroughTap(t, tap, mac)
			if ia := adv.Options.OneIANA(); ia == nil || ia.Options.OneAddress() == nil ||
				ia.Options.OneAddress().IPv6Addr.String() != v6.IP || len(adv.Options.DNS()) != 1 {
				t.Fatalf("DHCPv6 advertise: %s", adv.Summary())
			}
			if err := m.Teardown(ctx, pod, a); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// checkWiring6: no IPv6 address on the bridge ports, crimux's link-local
// one on the bridge, the default route to the gateway, forwarding on.
func checkWiring6(t *testing.T, a *Attachment, gateway string) {
	t.Helper()
	err := inNetNS(a.NetNS, func() error {
		for _, name := range []string{ifName, tapName} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if addrs, _ := netlink.AddrList(l, netlink.FAMILY_V6); len(addrs) != 0 {
				return fmt.Errorf("%s has IPv6 addresses %v", name, addrs)
			}
		}
		br, err := netlink.LinkByName(bridgeName)
		if err != nil {
			return err
		}
		addrs, _ := netlink.AddrList(br, netlink.FAMILY_V6)
		found := false
		for _, ad := range addrs {
			found = found || ad.IP.Equal(routerLinkLocal.AsSlice())
		}
		if !found {
			return fmt.Errorf("bridge addresses %v, no %s", addrs, routerLinkLocal)
		}
		routes, _ := netlink.RouteList(br, netlink.FAMILY_V6)
		found = false
		for _, r := range routes {
			found = found || (r.Gw.String() == gateway && (r.Dst == nil || r.Dst.String() == "::/0"))
		}
		if !found {
			return fmt.Errorf("routes %v, no default via %s", routes, gateway)
		}
		if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding"); string(b) != "1\n" {
			return fmt.Errorf("IPv6 forwarding %q", b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exchangeThroughTap writes frame (as the guest) every half second until
// a frame for which match returns true comes back.
func exchangeThroughTap(t *testing.T, tap *os.File, frame []byte, match func(*frame6) bool) {
	t.Helper()
	fd := int(tap.Fd())
	out := append(make([]byte, vnetHdrLen), frame...)
	buf := make([]byte, 65536)
	var sent time.Time
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if time.Since(sent) > 500*time.Millisecond {
			if _, err := unix.Write(fd, out); err != nil {
				t.Fatalf("write to tap: %v", err)
			}
			sent = time.Now()
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		got, err := unix.Read(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := parseFrame6(buf[vnetHdrLen:got]); err == nil && match(f) {
			return
		}
	}
	t.Fatal("no answer on the tap within 10 s")
}

func guestLinkLocal(mac net.HardwareAddr) netip.Addr {
	b := [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
	return netip.AddrFrom16(b)
}

func routerAdvertThroughTap(t *testing.T, tap *os.File, mac net.HardwareAddr) *ndp.RouterAdvertisement {
	t.Helper()
	src, dst := guestLinkLocal(mac), netip.MustParseAddr("ff02::2")
	rs, err := ndp.MarshalMessageChecksum(&ndp.RouterSolicitation{}, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	f := &frame6{SrcMAC: mac, DstMAC: multicastMAC(dst), Src: src, Dst: dst, NextHeader: protoICMPv6, HopLimit: 255, Payload: rs}
	var ra *ndp.RouterAdvertisement
	exchangeThroughTap(t, tap, f.bytes(), func(f *frame6) bool {
		if f.NextHeader != protoICMPv6 {
			return false
		}
		m, err := ndp.ParseMessage(f.Payload)
		ra, _ = m.(*ndp.RouterAdvertisement)
		return err == nil && ra != nil
	})
	return ra
}

func dhcp6ThroughTap(t *testing.T, tap *os.File, mac net.HardwareAddr) *dhcpv6.Message {
	t.Helper()
	sol, err := dhcpv6.NewSolicit(mac)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := guestLinkLocal(mac), netip.MustParseAddr("ff02::1:2")
	u := udpDatagram(src, dst, dhcp6ClientPort, dhcp6ServerPort, sol.ToBytes())
	f := &frame6{SrcMAC: mac, DstMAC: multicastMAC(dst), Src: src, Dst: dst, NextHeader: protoUDP, HopLimit: 1, Payload: u}
	var adv *dhcpv6.Message
	exchangeThroughTap(t, tap, f.bytes(), func(f *frame6) bool {
		if f.NextHeader != protoUDP {
			return false
		}
		_, port, data := udpPorts(f.Payload)
		if port != dhcp6ClientPort {
			return false
		}
		d, err := dhcpv6.FromBytes(data)
		adv, _ = d.(*dhcpv6.Message)
		return err == nil && adv != nil && adv.TransactionID == sol.TransactionID
	})
	return adv
}
