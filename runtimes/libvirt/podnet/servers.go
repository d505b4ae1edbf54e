package podnet

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
)

// guestServers answer one pod's guest: DHCPv4 for its IPv4 address,
// router advertisements and DHCPv6 for its IPv6 one (a dual-stack pod
// runs both, a single-stack one its family's).
type guestServers struct {
	v4 *responder
	v6 *guest6
}

func startGuestServers(pod *Pod, a *Attachment, log *slog.Logger) (*guestServers, error) {
	s := &guestServers{}
	if _, ok := a.IPv4(); ok {
		lease, err := a.lease(pod)
		if err != nil {
			return nil, err
		}
		if s.v4, err = startResponder(a.NetNS, lease, log); err != nil {
			return nil, err
		}
	}
	if v6, ok := a.IPv6(); ok {
		ad, lease, err := a.lease6(pod, v6)
		if err == nil {
			s.v6, err = startGuest6(a.NetNS, ad, lease, log)
		}
		if err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *guestServers) stop() {
	if s.v4 != nil {
		s.v4.stop()
	}
	if s.v6 != nil {
		s.v6.close()
	}
}

// lease is the guest's DHCPv4 lease: its first IPv4 address.
func (a *Attachment) lease(pod *Pod) (*Lease, error) {
	v4, _ := a.IPv4()
	ip, mask, err := ipNet(v4.IP, v4.PrefixLen)
	if err != nil {
		return nil, err
	}
	mac, err := net.ParseMAC(a.GuestMAC)
	if err != nil {
		return nil, fmt.Errorf("guest MAC: %w", err)
	}
	l := &Lease{
		MAC: mac, IP: ip, Mask: mask, Gateway: net.ParseIP(v4.Gateway).To4(), Routes: a.Routes,
		MTU: a.MTU, Search: pod.Search, Hostname: pod.Hostname, ServerID: net.ParseIP(serverIP).To4(),
	}
	for _, s := range pod.DNS {
		if d := net.ParseIP(s).To4(); d != nil {
			l.DNS = append(l.DNS, d)
		}
	}
	return l, nil
}

// lease6 is the guest's router advertisement and DHCPv6 lease: its first
// IPv6 address, its prefix on link, crimux its router when the pod has
// an IPv6 gateway (the namespace forwards: wire6.go), the pod's IPv6 DNS
// servers and search domains.
func (a *Attachment) lease6(pod *Pod, v6 Address) (*advert, *Lease6, error) {
	ip, err := netip.ParseAddr(v6.IP)
	if err != nil || !ip.Is6() || ip.Is4In6() {
		return nil, nil, fmt.Errorf("%q is no IPv6 address", v6.IP)
	}
	prefix, err := ip.Prefix(v6.PrefixLen)
	if err != nil {
		return nil, nil, fmt.Errorf("IPv6 address %s/%d: %w", v6.IP, v6.PrefixLen, err)
	}
	ad := &advert{Prefix: prefix, Router: v6.Gateway != "", MTU: a.MTU, Search: pod.Search}
	lease := &Lease6{IP: ip.AsSlice(), Search: pod.Search}
	for _, s := range pod.DNS {
		if d, err := netip.ParseAddr(s); err == nil && d.Is6() && !d.Is4In6() {
			ad.DNS = append(ad.DNS, d)
			lease.DNS = append(lease.DNS, d.AsSlice())
		}
	}
	return ad, lease, nil
}
