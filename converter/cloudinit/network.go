package cloudinit

import (
	"fmt"
	"net"

	"gopkg.in/yaml.v3"
)

// Network is the guest's addressing: what the pod's CNI result gave and
// crimux's DHCP responder hands out.
type Network struct {
	MAC       string
	IP        string
	PrefixLen int
	Gateway   string
	// AdditionalIPs are the pod's other addresses (dual stack).
	AdditionalIPs []Address
	Routes        []Route
	MTU           int
	DNS           []string
	Search        []string
	// Options are the pod's resolver options (ndots:5); network-config
	// cannot carry them (resolver.go).
	Options []string
}

// Address is one more address of the guest, with its prefix length and
// gateway (empty: none).
type Address struct {
	IP        string
	PrefixLen int
	Gateway   string
}

// Route is one route of the guest (GW empty: on link).
type Route struct{ Dst, GW string }

// netplan-style network config version 2 (cloud-init's networking config
// v2), the subset crimux writes.
type netConfig struct {
	Version   int                 `yaml:"version"`
	Ethernets map[string]ethernet `yaml:"ethernets"`
}

type ethernet struct {
	Match       map[string]string `yaml:"match"`
	SetName     string            `yaml:"set-name"`
	Addresses   []string          `yaml:"addresses"`
	Gateway4    string            `yaml:"gateway4,omitempty"`
	Gateway6    string            `yaml:"gateway6,omitempty"`
	MTU         int               `yaml:"mtu,omitempty"`
	Routes      []route           `yaml:"routes,omitempty"`
	Nameservers *nameservers      `yaml:"nameservers,omitempty"`
}

type route struct {
	To  string `yaml:"to"`
	Via string `yaml:"via"`
}

type nameservers struct {
	Addresses []string `yaml:"addresses,omitempty"`
	Search    []string `yaml:"search,omitempty"`
}

// guestIfName is the name the guest's NIC gets (matched by MAC).
const guestIfName = "eth0"

// networkConfig writes the network-config file: every address of the
// pod, the first gateway of each family, the other routes through their
// family's gateway.
func networkConfig(n Network) ([]byte, error) {
	mac, err := net.ParseMAC(n.MAC)
	if err != nil {
		return nil, fmt.Errorf("cloud-init network: MAC %q: %v", n.MAC, err)
	}
	e := ethernet{
		Match:   map[string]string{"macaddress": mac.String()},
		SetName: guestIfName,
		MTU:     n.MTU,
	}
	all := append([]Address{{IP: n.IP, PrefixLen: n.PrefixLen, Gateway: n.Gateway}}, n.AdditionalIPs...)
	for _, a := range all {
		ip := net.ParseIP(a.IP)
		if ip == nil || a.PrefixLen <= 0 || a.PrefixLen > 128 || (ip.To4() != nil && a.PrefixLen > 32) {
			return nil, fmt.Errorf("cloud-init network: address %s/%d", a.IP, a.PrefixLen)
		}
		e.Addresses = append(e.Addresses, fmt.Sprintf("%s/%d", ip, a.PrefixLen))
		switch {
		case a.Gateway == "":
		case ip.To4() != nil && e.Gateway4 == "":
			e.Gateway4 = a.Gateway
		case ip.To4() == nil && e.Gateway6 == "":
			e.Gateway6 = a.Gateway
		}
	}
	e.Routes = otherRoutes(n.Routes, e.Gateway4, e.Gateway6)
	if len(n.DNS) > 0 || len(n.Search) > 0 {
		e.Nameservers = &nameservers{Addresses: n.DNS, Search: n.Search}
	}
	return yaml.Marshal(netConfig{Version: 2, Ethernets: map[string]ethernet{guestIfName: e}})
}

// otherRoutes are the routes other than the default ones through the
// gateways, each through its own gateway or its family's.
func otherRoutes(routes []Route, gw4, gw6 string) []route {
	var out []route
	for _, r := range routes {
		_, dst, err := net.ParseCIDR(r.Dst)
		if err != nil {
			continue
		}
		gw := gw6
		if dst.IP.To4() != nil {
			gw = gw4
		}
		if ones, _ := dst.Mask.Size(); ones == 0 && (r.GW == "" || r.GW == gw) {
			continue // the gateway already
		}
		via := r.GW
		if via == "" {
			via = gw
		}
		if via == "" {
			continue
		}
		out = append(out, route{To: r.Dst, Via: via})
	}
	return out
}
