package podnet

import (
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

func ipConfig(idx *int, cidr, gw string) *types100.IPConfig {
	ip, n, _ := net.ParseCIDR(cidr)
	n.IP = ip
	return &types100.IPConfig{Interface: idx, Address: *n, Gateway: net.ParseIP(gw)}
}

func route(dst string) *types.Route {
	_, n, _ := net.ParseCIDR(dst)
	return &types.Route{Dst: *n}
}

// TestAddressingOfEveryFamily: every address of the pod's interface is
// kept; the pod IP is the first IPv4 one (containerd's choice), the rest
// keep the result's order; routes of both families; an IPv6-only pod;
// no address at all is an error naming the interface.
func TestAddressingOfEveryFamily(t *testing.T) {
	const netns = "/run/crimux/netns/x_1"
	pod := 2
	host := 1
	ifs := []*types100.Interface{{Name: "cni0"}, {Name: "veth1"}, {Name: "eth0", Sandbox: netns}}
	for name, tc := range map[string]struct {
		ips     []*types100.IPConfig
		routes  []*types.Route
		want    string // pod IP, then additional ones
		wantRts string
	}{
		"dual stack, IPv4 first": {
			ips:    []*types100.IPConfig{ipConfig(&pod, "10.1.0.7/24", "10.1.0.1"), ipConfig(&pod, "fd00:1::7/64", "fd00:1::1")},
			routes: []*types.Route{route("0.0.0.0/0"), route("::/0")},
			want:   "10.1.0.7/24>10.1.0.1 fd00:1::7/64>fd00:1::1", wantRts: "0.0.0.0/0 ::/0",
		},
		"dual stack, IPv6 first": {
			ips:  []*types100.IPConfig{ipConfig(&pod, "fd00:1::7/64", "fd00:1::1"), ipConfig(&pod, "10.1.0.7/24", "10.1.0.1")},
			want: "10.1.0.7/24>10.1.0.1 fd00:1::7/64>fd00:1::1",
		},
		"IPv6 only": {
			ips:  []*types100.IPConfig{ipConfig(&pod, "fd00:1::7/64", "fd00:1::1")},
			want: "fd00:1::7/64>fd00:1::1",
		},
		"another interface's address is not the guest's": {
			ips:  []*types100.IPConfig{ipConfig(&host, "10.1.0.1/24", ""), ipConfig(&pod, "fd00:1::7/64", "")},
			want: "fd00:1::7/64>",
		},
		"no interface index": {
			ips:  []*types100.IPConfig{ipConfig(nil, "10.1.0.7/24", ""), ipConfig(nil, "fd00:1::7/64", "")},
			want: "10.1.0.7/24> fd00:1::7/64>",
		},
	} {
		t.Run(name, func(t *testing.T) {
			res := &types100.Result{CNIVersion: "1.0.0", Interfaces: ifs, IPs: tc.ips, Routes: tc.routes}
			a, err := addressingOf(res, netns, "eth0")
			if err != nil {
				t.Fatal(err)
			}
			var got, rts []string
			for _, ad := range a.Addresses() {
				got = append(got, ad.IP+"/"+itoa(ad.PrefixLen)+">"+ad.Gateway)
			}
			for _, r := range a.Routes {
				rts = append(rts, r.Dst)
			}
			if strings.Join(got, " ") != tc.want || strings.Join(rts, " ") != tc.wantRts {
				t.Fatalf("addresses %v, routes %v; want %s, %s", got, rts, tc.want, tc.wantRts)
			}
			v4, has4 := a.IPv4()
			v6, has6 := a.IPv6()
			if has4 != strings.Contains(tc.want, ".") || has6 != strings.Contains(tc.want, ":") ||
				(has4 && !v4.IsIPv4()) || (has6 && v6.IsIPv4()) {
				t.Fatalf("IPv4 %v %v, IPv6 %v %v", v4, has4, v6, has6)
			}
		})
	}
	_, err := addressingOf(&types100.Result{CNIVersion: "1.0.0", Interfaces: ifs}, netns, "eth0")
	if err == nil || !strings.Contains(err.Error(), "no address for eth0") {
		t.Fatalf("a result without an address: %v", err)
	}
}

// TestAttachmentBeforeDualStack: a record written before dual stack (one
// IPv4 address in ip/prefix_len/gateway) reads as a pod with that one
// address, and a new one keeps the others in additional_ips.
func TestAttachmentBeforeDualStack(t *testing.T) {
	var old Attachment
	if err := jsonUnmarshal(`{"netns":"/n","conf":null,"ip":"10.1.0.7","prefix_len":24,"gateway":"10.1.0.1","ready":true}`, &old); err != nil {
		t.Fatal(err)
	}
	if got := old.Addresses(); len(got) != 1 || got[0] != (Address{IP: "10.1.0.7", PrefixLen: 24, Gateway: "10.1.0.1"}) {
		t.Fatalf("old record: %+v", got)
	}
	if _, ok := old.IPv6(); ok {
		t.Fatal("old record has IPv6")
	}
	a := Attachment{Ready: true}
	a.Address = Address{IP: "10.1.0.7", PrefixLen: 24}
	a.AdditionalIPs = []Address{{IP: "fd00:1::7", PrefixLen: 64}}
	if b := mustJSON(a); !strings.Contains(b, `"ip":"10.1.0.7","prefix_len":24,"additional_ips":[{"ip":"fd00:1::7","prefix_len":64}]`) {
		t.Fatalf("record: %s", b)
	}
}
