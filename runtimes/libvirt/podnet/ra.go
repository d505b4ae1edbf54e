package podnet

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// routerLinkLocal is crimux's IPv6 address on the pod's bridge: the
// source of its router advertisements and DHCPv6 answers, and the
// guest's default router when the pod has an IPv6 gateway (the pod's
// namespace then forwards to the CNI gateway: wire6.go). Link-local, so
// never routed; an EUI-64 or random interface ID is never ::1.
var routerLinkLocal = netip.MustParseAddr("fe80::1")

// allNodes is where unsolicited advertisements go (on the tap only: the
// guest is the one node that sees them).
var allNodes = netip.MustParseAddr("ff02::1")

const (
	// raInterval: unsolicited advertisements; the guest asks (RS) at
	// boot, these keep its router fresh across a crimux restart.
	raInterval = 2 * time.Minute
	// routerLifetime is the default route's life in the guest; three
	// advertisements renew it.
	routerLifetime = 30 * time.Minute
)

// advert is what the router advertisement tells the guest: the pod's
// prefix is on link, addresses come from DHCPv6 (the Managed flag: the
// pod IP is the CNI's, not one the guest would form), DNS (RFC 8106) for
// guests without a DHCPv6 client for it, and crimux is the default router
// when the pod has an IPv6 gateway.
type advert struct {
	Prefix netip.Prefix
	Router bool
	MTU    int
	MAC    net.HardwareAddr // the bridge's: the router's link-layer address
	DNS    []netip.Addr
	Search []string
}

func (a *advert) message() *ndp.RouterAdvertisement {
	ra := &ndp.RouterAdvertisement{
		CurrentHopLimit:      64,
		ManagedConfiguration: true,
		OtherConfiguration:   true,
		Options: []ndp.Option{
			&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: a.MAC},
			&ndp.PrefixInformation{
				PrefixLength: uint8(a.Prefix.Bits()), OnLink: true,
				ValidLifetime: ndp.Infinity, PreferredLifetime: ndp.Infinity,
				Prefix: a.Prefix.Masked().Addr(),
			},
		},
	}
	if a.Router {
		ra.RouterLifetime = routerLifetime
	}
	if a.MTU > 0 {
		ra.Options = append(ra.Options, ndp.NewMTU(uint32(a.MTU)))
	}
	if len(a.DNS) > 0 {
		ra.Options = append(ra.Options, &ndp.RecursiveDNSServer{Lifetime: ndp.Infinity, Servers: a.DNS})
	}
	if len(a.Search) > 0 {
		ra.Options = append(ra.Options, &ndp.DNSSearchList{Lifetime: ndp.Infinity, DomainNames: a.Search})
	}
	return ra
}

// frame is the advertisement to dst (all nodes, or the soliciting
// guest's link-local address) at dstMAC.
func (a *advert) frame(dst netip.Addr, dstMAC net.HardwareAddr) ([]byte, error) {
	b, err := ndp.MarshalMessageChecksum(a.message(), routerLinkLocal, dst)
	if err != nil {
		return nil, fmt.Errorf("router advertisement: %w", err)
	}
	// Hop limit 255: a guest drops neighbour discovery that may have
	// crossed a router.
	f := &frame6{SrcMAC: a.MAC, DstMAC: dstMAC, Src: routerLinkLocal, Dst: dst, NextHeader: protoICMPv6, HopLimit: 255, Payload: b}
	return f.bytes(), nil
}

// isRouterSolicitation tells a guest's RS (ICMPv6 133) from the rest.
func isRouterSolicitation(f *frame6) bool {
	return f.NextHeader == protoICMPv6 && len(f.Payload) > 0 && f.Payload[0] == byte(ipv6.ICMPTypeRouterSolicitation)
}
