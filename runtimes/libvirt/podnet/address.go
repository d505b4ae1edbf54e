package podnet

import (
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// Address is one address of the guest: the pod's interface's, from the
// CNI result, with its prefix length and gateway.
type Address struct {
	IP        string `json:"ip"`
	PrefixLen int    `json:"prefix_len"`
	Gateway   string `json:"gateway,omitempty"`
}

// IsIPv4 tells an IPv4 address from an IPv6 one.
func (a Address) IsIPv4() bool { return net.ParseIP(a.IP).To4() != nil }

// addressing is what the guest is told (DHCP, router advertisements,
// DHCPv6, cloud-init), from the CNI result. The first address sits in
// the fields a record has always had (ip, prefix_len, gateway), the
// others in additional_ips: a record of a crimux before dual stack reads
// as a pod with one address.
type addressing struct {
	Address
	// AdditionalIPs are the interface's other addresses, in the CNI
	// result's order: PodSandboxStatus' additional_ips.
	AdditionalIPs []Address `json:"additional_ips,omitempty"`
	// Routes of both families (a record from before dual stack has
	// IPv4 ones only).
	Routes []Route `json:"routes,omitempty"`
	// HostVeth is the pod's host-side interface: the last one the result
	// lists outside the pod's namespace before the pod's own (the bridge
	// plugin lists its bridge, the veth, then eth0; a plugin chained
	// after it, bandwidth's ifb, comes later).
	HostVeth string `json:"host_veth,omitempty"`
}

// Route is a route for the guest.
type Route struct {
	Dst string `json:"dst"`
	GW  string `json:"gw,omitempty"`
}

// Addresses are every address of the guest, the pod IP first.
func (a *addressing) Addresses() []Address {
	if a.IP == "" {
		return nil
	}
	return append([]Address{a.Address}, a.AdditionalIPs...)
}

// IPv4 is the guest's first IPv4 address (DHCPv4 hands it out).
func (a *addressing) IPv4() (Address, bool) { return a.first(true) }

// IPv6 is the guest's first IPv6 address (DHCPv6 hands it out).
func (a *addressing) IPv6() (Address, bool) { return a.first(false) }

func (a *addressing) first(v4 bool) (Address, bool) {
	for _, ad := range a.Addresses() {
		if ad.IsIPv4() == v4 {
			return ad, true
		}
	}
	return Address{}, false
}

// addressingOf takes every address of ifName in netns from a result. The
// pod IP is the first IPv4 address, or the first address when there is
// none: containerd's choice (its default ip_pref, "ipv4"), so a VM pod
// and a container pod on a dual-stack network report alike; the rest
// keep the result's order.
func addressingOf(res types.Result, netns, ifName string) (addressing, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return addressing{}, fmt.Errorf("CNI result: %w", err)
	}
	a := addressing{HostVeth: hostVethOf(r.Interfaces, ifName, netns)}
	all := interfaceAddresses(r, netns, ifName)
	if len(all) == 0 {
		return a, fmt.Errorf("CNI result has no address for %s (the network's IPAM gave none)", ifName)
	}
	primary := 0
	for i, ad := range all {
		if ad.IsIPv4() {
			primary = i
			break
		}
	}
	a.Address = all[primary]
	for i, ad := range all {
		if i != primary {
			a.AdditionalIPs = append(a.AdditionalIPs, ad)
		}
	}
	for _, rt := range r.Routes {
		route := Route{Dst: rt.Dst.String()}
		if rt.GW != nil {
			route.GW = rt.GW.String()
		}
		a.Routes = append(a.Routes, route)
	}
	return a, nil
}

// interfaceAddresses are the result's addresses of ifName in netns, or,
// when it names none, those of plugins that give no interface index.
func interfaceAddresses(r *types100.Result, netns, ifName string) []Address {
	var own, unbound []Address
	for _, ipc := range r.IPs {
		ad := addressOf(ipc)
		if ipc.Interface == nil {
			unbound = append(unbound, ad)
			continue
		}
		i := *ipc.Interface
		if i < 0 || i >= len(r.Interfaces) {
			continue
		}
		if itf := r.Interfaces[i]; itf.Name == ifName && (itf.Sandbox == "" || itf.Sandbox == netns) {
			own = append(own, ad)
		}
	}
	if len(own) > 0 {
		return own
	}
	return unbound
}

func addressOf(ipc *types100.IPConfig) Address {
	ones, _ := ipc.Address.Mask.Size()
	ad := Address{IP: ipc.Address.IP.String(), PrefixLen: ones}
	if ipc.Gateway != nil {
		ad.Gateway = ipc.Gateway.String()
	}
	return ad
}

// hostVethOf is the last interface outside the pod's namespace listed
// before the pod's own, or the last of all if the pod's is not listed.
func hostVethOf(interfaces []*types100.Interface, ifName, netns string) string {
	last := ""
	for _, itf := range interfaces {
		if itf.Name == ifName && itf.Sandbox != "" {
			if itf.Sandbox == netns {
				return last
			}
			continue
		}
		if itf.Sandbox == "" {
			last = itf.Name
		}
	}
	return last
}

// ipNet parses an IPv4 address and a prefix length.
func ipNet(ip string, prefixLen int) (net.IP, net.IPMask, error) {
	parsed := net.ParseIP(ip).To4()
	if parsed == nil {
		return nil, nil, fmt.Errorf("%q is no IPv4 address", ip)
	}
	return parsed, net.CIDRMask(prefixLen, 32), nil
}
