package podnet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Inside a pod's namespace (names are per namespace, so fixed ones do).
const (
	bridgeName = "crimux-br0"
	tapName    = "crimux-tap0"
	// serverIP is the DHCP responder's address on the bridge: link-local,
	// never routed, only the source of its answers and its server ID.
	serverIP = "169.254.75.1"
)

// tapFlags: a TAP with virtio-net headers, no packet info, as libvirt
// opens taps for qemu. qemu reads the flags off the fd it is given.
const tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// wiring is what the namespace looks like once wired.
type wiring struct {
	GuestMAC string // eth0's MAC before the swap: the guest's now
	MTU      int
}

// wire makes eth0 a port of a bridge with a tap for the guest; it runs
// inside the pod's namespace. Idempotent: a second run finds the bridge
// and keeps the MAC it recorded as the guest's.
func wire(ifName, guestMAC string) (wiring, error) {
	eth, err := netlink.LinkByName(ifName)
	if err != nil {
		return wiring{}, fmt.Errorf("CNI interface %s: %w", ifName, err)
	}
	w := wiring{GuestMAC: guestMAC, MTU: eth.Attrs().MTU}
	if w.GuestMAC == "" {
		w.GuestMAC = eth.Attrs().HardwareAddr.String()
	}
	br, err := ensureBridge(w.MTU)
	if err != nil {
		return w, err
	}
	if err := bridgeIPv6(br); err != nil {
		return w, err
	}
	if err := releaseIfToGuest(eth, w.GuestMAC); err != nil {
		return w, err
	}
	if err := netlink.LinkSetMaster(eth, br); err != nil {
		return w, fmt.Errorf("attach %s to %s: %w", ifName, bridgeName, err)
	}
	// No MAC learning on the CNI side: a host bridge port in hairpin mode
	// (the bridge plugin's hairpinMode) sends the guest's broadcasts back
	// in through eth0, which would teach the bridge that the guest lives
	// behind eth0 and drop every answer to it (an ARP request of the
	// guest's would never get its reply). Unknown destinations flood, and
	// on a two-port bridge that is eth0 anyway.
	if err := netlink.LinkSetLearning(eth, false); err != nil {
		return w, fmt.Errorf("turn MAC learning off on %s: %w", ifName, err)
	}
	tap, err := ensureTap(w.MTU)
	if err != nil {
		return w, err
	}
	if err := noIPv6(tapName); err != nil {
		return w, err
	}
	if err := netlink.LinkSetMaster(tap, br); err != nil {
		return w, fmt.Errorf("attach %s to %s: %w", tapName, bridgeName, err)
	}
	for _, l := range []netlink.Link{eth, tap, br} {
		if err := netlink.LinkSetUp(l); err != nil {
			return w, fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	return w, nil
}

func ensureBridge(mtu int) (netlink.Link, error) {
	if l, err := netlink.LinkByName(bridgeName); err == nil {
		return l, nil
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = bridgeName, mtu
	br := &netlink.Bridge{LinkAttrs: attrs}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("create bridge %s: %w", bridgeName, err)
	}
	addr, _ := netlink.ParseAddr(serverIP + "/32")
	if err := netlink.AddrReplace(br, addr); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", serverIP, bridgeName, err)
	}
	return netlink.LinkByName(bridgeName)
}

// releaseIfToGuest takes eth0's addresses away (the guest owns the pod
// IPs; IPv6 goes off eth0 altogether: wire6.go) and gives it a new MAC
// (the guest has its old one), once.
func releaseIfToGuest(eth netlink.Link, guestMAC string) error {
	if err := noIPv6(eth.Attrs().Name); err != nil {
		return err
	}
	addrs, err := netlink.AddrList(eth, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", eth.Attrs().Name, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(eth, &a); err != nil {
			return fmt.Errorf("remove %s from %s: %w", a.IPNet, eth.Attrs().Name, err)
		}
	}
	if eth.Attrs().HardwareAddr.String() != guestMAC {
		return nil // swapped already
	}
	mac, err := randomMAC()
	if err != nil {
		return err
	}
	if err := netlink.LinkSetHardwareAddr(eth, mac); err != nil {
		return fmt.Errorf("new MAC for %s: %w", eth.Attrs().Name, err)
	}
	return nil
}

// randomMAC is a locally administered unicast address.
func randomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, err
	}
	mac[0] = mac[0]&0xfe | 0x02
	return mac, nil
}

// ensureTap creates the persistent tap (it outlives every qemu process
// that attaches to it, until the namespace goes).
func ensureTap(mtu int) (netlink.Link, error) {
	if l, err := netlink.LinkByName(tapName); err == nil {
		return l, nil
	}
	f, err := openTapHere(tapName)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.TUNSETPERSIST, 1); errno != 0 {
		return nil, fmt.Errorf("make %s persistent: %w", tapName, errno)
	}
	l, err := netlink.LinkByName(tapName)
	if err != nil {
		return nil, err
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return nil, fmt.Errorf("MTU of %s: %w", tapName, err)
	}
	return l, nil
}

// openTapHere attaches a new file to the tap called name in the calling
// thread's network namespace (creating the tap if there is none). The
// file stays bound to that tap wherever it goes.
func openTapHere(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = tapFlags
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
		unix.Close(fd)
		if errors.Is(errno, unix.EBUSY) {
			return nil, fmt.Errorf("tap %s is attached to another process: %w", name, errno)
		}
		return nil, fmt.Errorf("attach to tap %s: %w", name, errno)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
