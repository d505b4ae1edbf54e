package podnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testbed"
)

// An integration test against the real CNI plugins (bridge, host-local,
// portmap, which test/bed/install.sh builds into /opt/cni/bin) on a
// bridge and subnet of its own: a pod network is set up, a "guest" speaks DHCP
// through the tap crimux hands qemu, and teardown leaves nothing.

const (
	itBridge = "crimuxpn0"
	itSubnet = "10.99.88.0/24"
	itBinDir = "/opt/cni/bin" // test/bed/lib.sh CNI_BIN_DIR
)

func integrationManager(t *testing.T) (*Manager, string) {
	t.Helper()
	return integrationManagerOn(t, itBridge, fmt.Sprintf(`[[{"subnet":%q}]]`, itSubnet), `[{"dst":"0.0.0.0/0"}]`)
}

// integrationManagerOn is integrationManager with a bridge, host-local
// ranges and routes of its own.
func integrationManagerOn(t *testing.T, bridge, ranges, routes string) (*Manager, string) {
	t.Helper()
	testbed.Require(t)
	if os.Getuid() != 0 {
		t.Fatal("test bed: needs root")
	}
	_, err := os.Stat(filepath.Join(itBinDir, "bridge"))
	testbed.Need(t, err, "CNI plugins in %s (test/bed/install.sh)", itBinDir)
	dir := t.TempDir()
	ipam := filepath.Join(dir, "ipam")
	conf := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeConf(t, conf, "10-it.conflist", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"crimux-podnet-it","plugins":[
	 {"type":"bridge","bridge":%q,"isGateway":true,"ipam":{"type":"host-local","ranges":%s,
	  "routes":%s,"dataDir":%q}},
	 {"type":"portmap","capabilities":{"portMappings":true}}]}`, bridge, ranges, routes, ipam))
	netnsDir := filepath.Join(dir, "netns")
	m, err := NewManager(Config{ConfDir: conf, BinDirs: []string{itBinDir}, CacheDir: filepath.Join(dir, "cache"),
		NetnsDir: netnsDir, Instance: "crimux-it"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
		_ = unix.Unmount(netnsDir, unix.MNT_DETACH)
	})
	return m, filepath.Join(ipam, "crimux-podnet-it")
}

func TestIntegrationPodNetworkLifecycle(t *testing.T) {
	m, ipamDir := integrationManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := &Pod{SandboxID: "0123456789abcdef", Namespace: "default", Name: "vm-it", UID: "uid-it", Hostname: "vm-it",
		DNS: []string{"10.96.0.10"}, Ports: []PortMapping{{HostPort: 18999, ContainerPort: 8080, Protocol: "tcp"}}}
	a, err := m.Plan(pod.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Setup(ctx, pod, a); err != nil {
		t.Fatal(err)
	}
	if !a.Ready || a.IP == "" || a.PrefixLen != 24 || a.Gateway != "10.99.88.1" || a.GuestMAC == "" || a.HostVeth == "" {
		t.Fatalf("attachment = %+v", a)
	}
	if _, err := os.Stat(filepath.Join(ipamDir, a.IP)); err != nil {
		t.Fatalf("host-local holds no lease for %s: %v", a.IP, err)
	}
	checkWiring(t, a)

	// The guest's side: DHCP through the very tap qemu would get.
	if err := m.StartDHCP(pod, a); err != nil {
		t.Fatal(err)
	}
	before, err := m.GuestPackets(a)
	if err != nil {
		t.Fatal(err)
	}
	tap, err := m.OpenTap(a)
	if err != nil {
		t.Fatal(err)
	}
	offer := dhcpThroughTap(t, tap, a.GuestMAC)
	tap.Close()
	// What the guest sent counts (the boot watch's sign of a guest OS).
	if after, err := m.GuestPackets(a); err != nil || after <= before {
		t.Fatalf("guest packets %d before DHCP, %d (%v) after", before, after, err)
	}
	if !offer.YourIPAddr.Equal(net.ParseIP(a.IP)) || offer.HostName() != "vm-it" || len(offer.Router()) != 1 || offer.Router()[0].String() != a.Gateway {
		t.Fatalf("offer: yiaddr %s hostname %q router %v; want %s, vm-it, %s", offer.YourIPAddr, offer.HostName(), offer.Router(), a.IP, a.Gateway)
	}
	// A second qemu process (restore, revert) attaches again.
	tap2, err := m.OpenTap(a)
	if err != nil {
		t.Fatalf("tap not reusable after the first holder closed it: %v", err)
	}
	tap2.Close()

	if err := m.Teardown(ctx, pod, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(ctx, pod, a); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	if _, err := os.Stat(a.NetNS); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still there: %v", a.NetNS, err)
	}
	if _, err := os.Stat(filepath.Join(ipamDir, a.IP)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IP %s still allocated: %v", a.IP, err)
	}
	if _, err := netlink.LinkByName(a.HostVeth); err == nil {
		t.Errorf("host veth %s still there", a.HostVeth)
	}
	if own, _, err := m.Namespaces(); err != nil || len(own) != 0 {
		t.Errorf("namespaces after teardown: %v, %v", own, err)
	}
}

// checkWiring looks inside the pod's namespace: eth0 without an address
// and a new MAC, eth0 and the tap on the bridge.
func checkWiring(t *testing.T, a *Attachment) {
	t.Helper()
	err := inNetNS(a.NetNS, func() error {
		eth, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		addrs, _ := netlink.AddrList(eth, netlink.FAMILY_V4)
		if len(addrs) != 0 {
			return fmt.Errorf("eth0 still has %v", addrs)
		}
		if eth.Attrs().HardwareAddr.String() == a.GuestMAC {
			return fmt.Errorf("eth0 kept the guest's MAC %s", a.GuestMAC)
		}
		br, err := netlink.LinkByName(bridgeName)
		if err != nil {
			return err
		}
		tap, err := netlink.LinkByName(tapName)
		if err != nil {
			return err
		}
		if eth.Attrs().MasterIndex != br.Attrs().Index || tap.Attrs().MasterIndex != br.Attrs().Index {
			return fmt.Errorf("eth0 master %d, tap master %d, bridge %d", eth.Attrs().MasterIndex, tap.Attrs().MasterIndex, br.Attrs().Index)
		}
		if p, err := netlink.LinkGetProtinfo(eth); err != nil || p.Learning {
			return fmt.Errorf("eth0 learns MACs (%+v, %v): hairpinned guest broadcasts would hide the guest", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dhcpThroughTap sends a DISCOVER as the guest would (a raw frame with
// the virtio-net header the tap expects) and returns the OFFER.
func dhcpThroughTap(t *testing.T, tap *os.File, mac string) *dhcpv4.DHCPv4 {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	disc, err := dhcpv4.NewDiscovery(hw)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(tap.Fd())
	frame := append(make([]byte, vnetHdrLen), dhcpFrame(hw, disc.ToBytes())...)
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 65536)
	// Sent again every half second, as a DHCP client does: the bridge
	// port of a tap comes up only once the kernel has seen the carrier
	// the attach gave it (link events are handled with a delay), and a
	// frame before that is dropped.
	var sent time.Time
	for time.Now().Before(deadline) {
		if time.Since(sent) > 500*time.Millisecond {
			if _, err := unix.Write(fd, frame); err != nil {
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
		if payload, ok := udpPayload(buf[vnetHdrLen:got], 68); ok {
			if m, err := dhcpv4.FromBytes(payload); err == nil && m.TransactionID == disc.TransactionID {
				return m
			}
		}
	}
	t.Fatal("no DHCP offer on the tap within 10 s")
	return nil
}

// vnetHdrLen is struct virtio_net_hdr, which IFF_VNET_HDR prepends.
const vnetHdrLen = 10

// dhcpFrame wraps a BOOTP payload in Ethernet/IPv4/UDP, 0.0.0.0:68 to
// 255.255.255.255:67.
func dhcpFrame(src net.HardwareAddr, payload []byte) []byte {
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 68)
	binary.BigEndian.PutUint16(udp[2:], 67)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[16:], net.IPv4bcast.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	eth := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src...), 0x08, 0x00)
	return append(append(eth, ip...), udp...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// udpPayload returns an IPv4/UDP frame's payload when it goes to dstPort.
func udpPayload(frame []byte, dstPort uint16) ([]byte, bool) {
	if len(frame) < 14+20+8 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return nil, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return nil, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:]) != dstPort {
		return nil, false
	}
	return udp[8:], true
}
