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
	Routes    []Route
	MTU       int
	DNS       []string
	Search    []string
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

// networkConfig writes the network-config file.
func networkConfig(n Network) ([]byte, error) {
	mac, err := net.ParseMAC(n.MAC)
	if err != nil {
		return nil, fmt.Errorf("cloud-init network: MAC %q: %v", n.MAC, err)
	}
	ip := net.ParseIP(n.IP)
	if ip == nil || n.PrefixLen <= 0 || n.PrefixLen > 128 {
		return nil, fmt.Errorf("cloud-init network: address %s/%d", n.IP, n.PrefixLen)
	}
	e := ethernet{
		Match:     map[string]string{"macaddress": mac.String()},
		SetName:   guestIfName,
		Addresses: []string{fmt.Sprintf("%s/%d", ip, n.PrefixLen)},
		Gateway4:  n.Gateway,
		MTU:       n.MTU,
	}
	for _, r := range n.Routes {
		if r.Dst == "0.0.0.0/0" && (r.GW == "" || r.GW == n.Gateway) {
			continue // the gateway already
		}
		via := r.GW
		if via == "" {
			via = n.Gateway
		}
		if via == "" {
			continue
		}
		e.Routes = append(e.Routes, route{To: r.Dst, Via: via})
	}
	if len(n.DNS) > 0 || len(n.Search) > 0 {
		e.Nameservers = &nameservers{Addresses: n.DNS, Search: n.Search}
	}
	return yaml.Marshal(netConfig{Version: 2, Ethernets: map[string]ethernet{guestIfName: e}})
}
