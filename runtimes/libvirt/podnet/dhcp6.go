package podnet

import (
	"bytes"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// infiniteLifetime: the guest never renews its IPv6 address (as its
// IPv4 lease), so a crimux restart never costs it the address.
const infiniteLifetime = infiniteLease

// Lease6 is what the DHCPv6 responder hands the guest: the pod's IPv6
// address (IA_NA; the prefix is on link from the router advertisement),
// DNS servers and search domains.
type Lease6 struct {
	IP     net.IP
	DNS    []net.IP
	Search []string
	// ServerMAC makes the server's DUID (DUID-LL of the pod's bridge).
	ServerMAC net.HardwareAddr
}

func (l *Lease6) serverID() dhcpv6.DUID {
	return &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: l.ServerMAC}
}

// reply answers one DHCPv6 message of the guest's, or returns nil to stay
// silent (a message for another server, or one no server answers).
func (l *Lease6) reply(msg *dhcpv6.Message) (*dhcpv6.Message, error) {
	if sid := msg.Options.ServerID(); sid != nil && !bytes.Equal(sid.ToBytes(), l.serverID().ToBytes()) {
		return nil, nil
	}
	if msg.Options.ClientID() == nil {
		if msg.Type() != dhcpv6.MessageTypeInformationRequest {
			return nil, nil
		}
		rep := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeReply, TransactionID: msg.TransactionID}
		for _, mod := range l.modifiers(nil) {
			mod(rep)
		}
		return rep, nil
	}
	switch msg.Type() {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			return dhcpv6.NewReplyFromMessage(msg, l.modifiers(msg.Options.OneIANA())...)
		}
		return dhcpv6.NewAdvertiseFromSolicit(msg, l.modifiers(msg.Options.OneIANA())...)
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		return dhcpv6.NewReplyFromMessage(msg, l.modifiers(msg.Options.OneIANA())...)
	case dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeInformationRequest:
		return dhcpv6.NewReplyFromMessage(msg, l.modifiers(nil)...)
	}
	return nil, nil
}

// modifiers: the server ID, the address in the client's IA_NA (when it
// asked for one), DNS.
func (l *Lease6) modifiers(ia *dhcpv6.OptIANA) []dhcpv6.Modifier {
	mods := []dhcpv6.Modifier{dhcpv6.WithServerID(l.serverID())}
	if ia != nil {
		addr := &dhcpv6.OptIAAddress{IPv6Addr: l.IP, PreferredLifetime: infiniteLifetime, ValidLifetime: infiniteLifetime}
		out := &dhcpv6.OptIANA{IaId: ia.IaId, T1: infiniteLifetime, T2: infiniteLifetime}
		out.Options.Add(addr)
		mods = append(mods, dhcpv6.WithOption(out))
	}
	if len(l.DNS) > 0 {
		mods = append(mods, dhcpv6.WithDNS(l.DNS...))
	}
	if len(l.Search) > 0 {
		mods = append(mods, dhcpv6.WithDomainSearchList(l.Search...))
	}
	return mods
}
