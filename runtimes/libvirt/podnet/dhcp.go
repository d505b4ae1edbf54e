package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// infiniteLease: the guest never renews, so a crimux restart (the
// responder restarts with it) never costs the guest its address.
const infiniteLease = time.Duration(0xffffffff) * time.Second

// Lease is everything the DHCP responder hands the guest.
type Lease struct {
	MAC       net.HardwareAddr
	IP        net.IP
	Mask      net.IPMask
	Gateway   net.IP // nil: none
	Routes    []Route
	MTU       int
	DNS       []net.IP
	Search    []string
	Hostname  string
	ServerID  net.IP
	LeaseTime time.Duration
}

// reply answers one DHCP message, or returns nil to stay silent: only
// the guest's own DISCOVER and REQUEST get an answer.
func (l *Lease) reply(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(req.ClientHWAddr, l.MAC) {
		return nil, nil
	}
	var typ dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		typ = dhcpv4.MessageTypeAck
		if want := req.RequestedIPAddress(); want != nil && !want.IsUnspecified() && !want.Equal(l.IP) {
			typ = dhcpv4.MessageTypeNak
		}
		if ci := req.ClientIPAddr; ci != nil && !ci.IsUnspecified() && !ci.Equal(l.IP) {
			typ = dhcpv4.MessageTypeNak
		}
	default:
		return nil, nil
	}
	if typ == dhcpv4.MessageTypeNak {
		return dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(typ),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.ServerID)))
	}
	return dhcpv4.NewReplyFromRequest(req, l.modifiers(typ)...)
}

func (l *Lease) modifiers(typ dhcpv4.MessageType) []dhcpv4.Modifier {
	lease := l.LeaseTime
	if lease == 0 {
		lease = infiniteLease
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(l.IP),
		dhcpv4.WithNetmask(l.Mask),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.ServerID)),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(lease)),
	}
	if l.Gateway != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRouter(l.Gateway)))
	}
	if routes := l.classless(); len(routes) > 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(routes...)))
	}
	if l.MTU > 0 {
		mtu := []byte{byte(l.MTU >> 8), byte(l.MTU)}
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionInterfaceMTU, mtu))
	}
	if len(l.DNS) > 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptDNS(l.DNS...)))
	}
	if len(l.Search) > 0 {
		mods = append(mods, dhcpv4.WithDomainSearchList(l.Search...))
	}
	if l.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(l.Hostname)))
	}
	return mods
}

// classless is option 121 (RFC 3442) when the network has routes other
// than a default one; a client that gets it ignores the router option,
// so the default route goes in too.
func (l *Lease) classless() []*dhcpv4.Route {
	var out []*dhcpv4.Route
	onlyDefault := true
	for _, r := range l.Routes {
		_, dst, err := net.ParseCIDR(r.Dst)
		if err != nil || dst.IP.To4() == nil {
			continue
		}
		gw := net.ParseIP(r.GW).To4()
		if gw == nil {
			gw = l.Gateway
		}
		if gw == nil {
			continue
		}
		if ones, _ := dst.Mask.Size(); ones != 0 {
			onlyDefault = false
		}
		out = append(out, &dhcpv4.Route{Dest: dst, Router: gw})
	}
	if onlyDefault {
		return nil
	}
	return out
}

// responder serves one pod's guest on the bridge of the pod's namespace.
type responder struct {
	srv *server4.Server
}

// startResponder listens on the bridge inside netns (the socket stays in
// that namespace whatever thread uses it) and serves until stop.
func startResponder(netns string, lease *Lease, log *slog.Logger) (*responder, error) {
	var conn *net.UDPConn
	err := inNetNS(netns, func() error {
		var err error
		conn, err = server4.NewIPv4UDPConn(bridgeName, &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("DHCP socket on %s in %s: %w", bridgeName, netns, err)
	}
	var seen echoFilter
	handler := func(c net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
		if seen.repeat(req) {
			return
		}
		resp, err := lease.reply(req)
		if err != nil {
			log.Warn("DHCP reply not built", "err", err)
			return
		}
		if resp == nil {
			return
		}
		if _, err := c.WriteTo(resp.ToBytes(), peer); err != nil {
			log.Warn("DHCP reply not sent", "to", peer, "err", err)
			return
		}
		log.Debug("DHCP answered", "type", resp.MessageType(), "ip", lease.IP)
	}
	srv, err := server4.NewServer(bridgeName, nil, handler, server4.WithConn(conn))
	if err != nil {
		conn.Close()
		return nil, err
	}
	go func() {
		if err := srv.Serve(); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Debug("DHCP responder stopped", "err", err)
		}
	}()
	return &responder{srv: srv}, nil
}

func (r *responder) stop() { _ = r.srv.Close() }

// echoWindow: a hairpin echo is back within microseconds; a client's
// retransmission of the same request (same transaction ID) comes a second
// or more later and must be answered.
const echoWindow = 100 * time.Millisecond

// echoFilter drops a request seen a moment ago: a bridge port in hairpin
// mode (the bridge plugin's hairpinMode) sends the guest's broadcasts
// back into the pod, so each arrives twice.
type echoFilter struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

func (f *echoFilter) repeat(req *dhcpv4.DHCPv4) bool {
	key := req.TransactionID.String() + "/" + req.MessageType().String()
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if key == f.last && now.Sub(f.at) < echoWindow {
		return true
	}
	f.last, f.at = key, now
	return false
}
