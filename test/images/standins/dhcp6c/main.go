// Command dhcp6c is the test VM's DHCPv6 client (Debian's static busybox
// has no udhcpc6), a stand-in for the one a distribution's network manager
// runs when a router advertisement has the Managed flag. It asks for an
// address on the interface named by its argument (Solicit with Rapid
// Commit; Advertise, Request, Reply with a server that does not commit at
// once), adds it as <address>/128 (the prefix is on link from the router
// advertisement, as the kernel takes it), appends the DNS servers to
// /etc/resolv.conf, writes the address to /run/net6-address and prints
// "CRIMUX-NET6: <address>" (and "CRIMUX-DNS6: <servers>"). It exits 1 without an answer within 30 s (a
// pod without IPv6).
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// DHCPv6 (RFC 8415): message types and options used here.
const (
	msgSolicit, msgAdvertise, msgRequest, msgReply = 1, 2, 3, 7
	optClientID, optServerID, optIANA, optIAAddr   = 1, 2, 3, 5
	optORO, optElapsed, optRapidCommit, optDNS     = 6, 8, 14, 23
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dhcp6c <interface>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp6c:", err)
		os.Exit(1)
	}
}

func run(ifName string) error {
	ifi, err := net.InterfaceByName(ifName)
	if err != nil {
		return err
	}
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified, Port: 546})
	if err != nil {
		return err
	}
	defer conn.Close()
	server := &net.UDPAddr{IP: net.ParseIP("ff02::1:2"), Port: 547, Zone: ifName}
	sol := message(msgSolicit, ifi.HardwareAddr, nil)
	rep, err := exchange(conn, server, sol, 30)
	if err != nil {
		return err
	}
	if rep.typ == msgAdvertise {
		req := message(msgRequest, ifi.HardwareAddr, rep.serverID)
		if rep, err = exchange(conn, server, req, 10); err != nil {
			return err
		}
	}
	if rep.typ != msgReply || rep.addr == nil {
		return errors.New("no address in the server's reply")
	}
	return configure(ifName, rep)
}

// message is a Solicit or a Request for one address (IA_NA) and DNS.
func message(typ byte, mac net.HardwareAddr, serverID []byte) []byte {
	m := []byte{typ, 0, 0, 0}
	_, _ = rand.Read(m[1:4])
	duid := append([]byte{0, 3, 0, 1}, mac...) // DUID-LL, Ethernet
	ia := make([]byte, 12)
	copy(ia, mac[len(mac)-4:]) // IAID; T1, T2 0: the server's choice
	m = option(m, optClientID, duid)
	m = option(m, optIANA, ia)
	m = option(m, optElapsed, []byte{0, 0})
	m = option(m, optORO, []byte{0, optDNS})
	if serverID != nil {
		return option(m, optServerID, serverID)
	}
	return option(m, optRapidCommit, nil)
}

func option(m []byte, code uint16, data []byte) []byte {
	m = binary.BigEndian.AppendUint16(m, code)
	m = binary.BigEndian.AppendUint16(m, uint16(len(data)))
	return append(m, data...)
}

type reply struct {
	typ      byte
	serverID []byte
	addr     net.IP
	dns      []net.IP
}

// exchange sends msg every second until an answer with its transaction
// ID comes, at most tries times.
func exchange(conn *net.UDPConn, server *net.UDPAddr, msg []byte, tries int) (*reply, error) {
	buf := make([]byte, 1500)
	for i := 0; i < tries; i++ {
		// Fails while the interface's link-local address is tentative.
		_, _ = conn.WriteToUDP(msg, server)
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if n >= 4 && bytes.Equal(buf[1:4], msg[1:4]) && (buf[0] == msgAdvertise || buf[0] == msgReply) {
				return parse(buf[:n]), nil
			}
		}
	}
	return nil, errors.New("no DHCPv6 server answered")
}

func parse(b []byte) *reply {
	r := &reply{typ: b[0]}
	walk(b[4:], func(code uint16, data []byte) {
		switch code {
		case optServerID:
			r.serverID = append([]byte(nil), data...)
		case optDNS:
			for ; len(data) >= 16; data = data[16:] {
				r.dns = append(r.dns, net.IP(append([]byte(nil), data[:16]...)))
			}
		case optIANA:
			if len(data) >= 12 {
				walk(data[12:], func(code uint16, data []byte) {
					if code == optIAAddr && len(data) >= 24 && r.addr == nil {
						r.addr = net.IP(append([]byte(nil), data[:16]...))
					}
				})
			}
		}
	})
	return r
}

func walk(b []byte, fn func(code uint16, data []byte)) {
	for len(b) >= 4 {
		code, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if 4+n > len(b) {
			return
		}
		fn(code, b[4:4+n])
		b = b[4+n:]
	}
}

func configure(ifName string, r *reply) error {
	if out, err := exec.Command("ip", "-6", "addr", "add", r.addr.String()+"/128", "dev", ifName).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr add: %v: %s", err, out)
	}
	if f, err := os.OpenFile("/etc/resolv.conf", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		for _, d := range r.dns {
			fmt.Fprintf(f, "nameserver %s\n", d)
		}
		f.Close()
	}
	if err := os.WriteFile("/run/net6-address", []byte(r.addr.String()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("CRIMUX-NET6: %s\n", r.addr)
	if len(r.dns) > 0 {
		fmt.Printf("CRIMUX-DNS6: %s\n", joinIPs(r.dns))
	}
	return nil
}

func joinIPs(ips []net.IP) string {
	s := ""
	for i, ip := range ips {
		if i > 0 {
			s += " "
		}
		s += ip.String()
	}
	return s
}
