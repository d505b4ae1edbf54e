package podnet

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPv6 inside a pod's namespace. The bridge ports (eth0, the tap) carry
// the guest's IPv6 but hold none of their own: eth0's link-local address
// is made from the MAC the guest now has, so it would fail the guest's
// duplicate address detection, and the pod's IPv6 address is the guest's.
// The bridge holds routerLinkLocal, crimux's (ra.go).

// sysctlIPv6 sets net.ipv6.conf.<link>.<key> in the calling thread's
// namespace.
func sysctlIPv6(link, key, value string) error {
	p := filepath.Join("/proc/sys/net/ipv6/conf", link, key)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl net.ipv6.conf.%s.%s=%s: %w", link, key, value, err)
	}
	return nil
}

// ipv6Enabled: a kernel booted with ipv6.disable=1 has no IPv6 to set
// up (and its pods none to hand out).
func ipv6Enabled() bool {
	_, err := os.Stat("/proc/sys/net/ipv6/conf")
	return err == nil
}

// noIPv6 takes IPv6 off a bridge port (its addresses go with it).
func noIPv6(link string) error {
	if !ipv6Enabled() {
		return nil
	}
	return sysctlIPv6(link, "disable_ipv6", "1")
}

// bridgeIPv6 gives the bridge crimux's link-local address, usable at
// once (no duplicate address detection: nobody else on this link has
// it), before the bridge comes up.
func bridgeIPv6(br netlink.Link) error {
	if !ipv6Enabled() {
		return nil
	}
	if err := sysctlIPv6(bridgeName, "accept_dad", "0"); err != nil {
		return err
	}
	addr := &netlink.Addr{
		IPNet: &net.IPNet{IP: routerLinkLocal.AsSlice(), Mask: net.CIDRMask(64, 128)},
		Flags: unix.IFA_F_NODAD,
	}
	if err := netlink.AddrReplace(br, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", routerLinkLocal, bridgeName, err)
	}
	return nil
}

// routeIPv6 makes the pod's namespace the guest's IPv6 router: the
// guest's default router is crimux's link-local address (only the
// advertisement's source can be its router, and crimux cannot send as
// the CNI gateway), and the namespace forwards what it gets to the CNI
// gateway, on the same link. Answers from outside come straight back to
// the guest (the gateway has it on link).
func routeIPv6(gateway string) error {
	gw := net.ParseIP(gateway)
	if gw == nil || gw.To4() != nil {
		return fmt.Errorf("IPv6 gateway %q", gateway)
	}
	br, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return err
	}
	if err := sysctlIPv6("all", "forwarding", "1"); err != nil {
		return err
	}
	_, def, _ := net.ParseCIDR("::/0")
	rt := &netlink.Route{LinkIndex: br.Attrs().Index, Dst: def, Gw: gw, Flags: int(netlink.FLAG_ONLINK)}
	if err := netlink.RouteReplace(rt); err != nil {
		return fmt.Errorf("IPv6 default route via %s: %w", gateway, err)
	}
	return nil
}
