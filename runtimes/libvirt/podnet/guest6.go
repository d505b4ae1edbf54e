package podnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// DHCPv6 ports (RFC 8415).
const (
	dhcp6ClientPort = 546
	dhcp6ServerPort = 547
)

// guest6 is the IPv6 side of a pod's guest configuration: router
// advertisements and a stateful DHCPv6 server. Both speak to the guest
// through a packet socket on the pod's tap, not a socket on the bridge:
// what crimux writes to the tap reaches the guest alone, and what it
// reads there comes from the guest alone. On the bridge, the advertisement
// would also go out through eth0 onto the node's pod network (every pod
// on it would take crimux for a router), and the DHCPv6 server would hear,
// through the node's bridge, every other VM pod's guest asking for an
// address — which, unlike DHCPv4's, names no MAC address to tell them by.
type guest6 struct {
	file *os.File
	stop chan struct{}
	done chan struct{}
}

// startGuest6 serves the guest on the tap in netns until stop.
func startGuest6(netns string, ad *advert, lease *Lease6, log *slog.Logger) (*guest6, error) {
	var file *os.File
	err := inNetNS(netns, func() error {
		br, err := net.InterfaceByName(bridgeName)
		if err != nil {
			return err
		}
		ad.MAC, lease.ServerMAC = br.HardwareAddr, br.HardwareAddr
		file, err = openGuestSocket(tapName)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("IPv6 responder on %s in %s: %w", tapName, netns, err)
	}
	g := &guest6{file: file, stop: make(chan struct{}), done: make(chan struct{})}
	go g.advertise(ad, log)
	go g.serve(ad, lease, log)
	return g, nil
}

func (g *guest6) close() {
	close(g.stop)
	_ = g.file.Close()
	<-g.done
}

// advertise sends unsolicited advertisements (a guest that is not
// running yet has no carrier on the tap: those are lost, its RS at boot
// is answered).
func (g *guest6) advertise(ad *advert, log *slog.Logger) {
	t := time.NewTicker(raInterval)
	defer t.Stop()
	for {
		if b, err := ad.frame(allNodes, multicastMAC(allNodes)); err == nil {
			if _, err := g.file.Write(b); err != nil {
				log.Debug("router advertisement not sent", "err", err)
			}
		}
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
	}
}

// serve answers router solicitations and DHCPv6 messages.
func (g *guest6) serve(ad *advert, lease *Lease6, log *slog.Logger) {
	defer close(g.done)
	buf := make([]byte, 1<<16)
	for {
		n, err := g.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Debug("IPv6 responder stopped", "err", err)
			}
			return
		}
		f, err := parseFrame6(buf[:n])
		if err != nil {
			continue
		}
		out, err := answer6(f, ad, lease)
		if err != nil {
			log.Warn("IPv6 answer not built", "err", err)
			continue
		}
		if out != nil {
			if _, err := g.file.Write(out); err != nil {
				log.Warn("IPv6 answer not sent", "err", err)
			}
		}
	}
}

// answer6 is the frame that answers f, nil for none.
func answer6(f *frame6, ad *advert, lease *Lease6) ([]byte, error) {
	if isRouterSolicitation(f) {
		dst, dstMAC := f.Src, f.SrcMAC
		if !dst.IsLinkLocalUnicast() { // unspecified: not yet an address
			dst, dstMAC = allNodes, multicastMAC(allNodes)
		}
		return ad.frame(dst, dstMAC)
	}
	if f.NextHeader != protoUDP || !f.Src.IsLinkLocalUnicast() {
		return nil, nil
	}
	srcPort, dstPort, data := udpPorts(f.Payload)
	if dstPort != dhcp6ServerPort || srcPort != dhcp6ClientPort {
		return nil, nil
	}
	d, err := dhcpv6.FromBytes(data)
	if err != nil {
		return nil, nil // not ours to debug
	}
	msg, ok := d.(*dhcpv6.Message)
	if !ok {
		return nil, nil // a relay's
	}
	rep, err := lease.reply(msg)
	if rep == nil || err != nil {
		return nil, err
	}
	u := udpDatagram(routerLinkLocal, f.Src, dhcp6ServerPort, dhcp6ClientPort, rep.ToBytes())
	out := &frame6{SrcMAC: ad.MAC, DstMAC: f.SrcMAC, Src: routerLinkLocal, Dst: f.Src, NextHeader: protoUDP, HopLimit: 255, Payload: u}
	return out.bytes(), nil
}

// openGuestSocket opens a packet socket on the tap called name, in the
// calling thread's namespace, that reads what the guest sends and that
// matters here (guest6Filter) — not the frames the bridge sends it.
func openGuestSocket(name string) (*os.File, error) {
	tap, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	// ETH_P_ALL: a socket for one protocol gets a bridge port's frames
	// only after the bridge, which takes them all; filtered below.
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	setup := func() error {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			return fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
		}
		if err := attachFilter(fd, guest6Filter); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: tap.Index})
	}
	if err := setup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "packet:"+name), nil
}

// guest6Filter keeps a guest's router solicitations (ICMPv6 133) and its
// messages to a DHCPv6 server (UDP to 547) out of the rest of its IPv6
// traffic, in the kernel: the socket never sees the guest's bulk traffic.
var guest6Filter = []bpf.Instruction{
	bpf.LoadAbsolute{Off: 12, Size: 2},                                   // 0: EtherType
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipFalse: 8},    // 1: not IPv6 -> 10
	bpf.LoadAbsolute{Off: ethHeaderLen + 6, Size: 1},                     // 2: next header
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 2},      // 3: not ICMPv6 -> 6
	bpf.LoadAbsolute{Off: ethHeaderLen + ipv6HeaderLen, Size: 1},         // 4: ICMPv6 type
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: 133, SkipTrue: 3, SkipFalse: 4}, // 5: RS -> 9, else -> 10
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoUDP, SkipFalse: 3},         // 6: not UDP -> 10
	bpf.LoadAbsolute{Off: ethHeaderLen + ipv6HeaderLen + 2, Size: 2},     // 7: UDP destination port
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: dhcp6ServerPort, SkipFalse: 1},  // 8: not DHCPv6 -> 10
	bpf.RetConstant{Val: 1 << 16},                                        // 9: keep
	bpf.RetConstant{Val: 0},                                              // 10: drop
}

func attachFilter(fd int, prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return fmt.Errorf("attach the packet filter: %w", err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// addrOf parses an IP for the IPv6 side (the zero Addr if it is none).
func addrOf(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
