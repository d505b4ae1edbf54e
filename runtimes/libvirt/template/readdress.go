package template

import (
	"fmt"
	"net"
	"strings"
)

// ReaddressScript is the shell script (run as root through the guest
// agent) that gives a migrated guest its new pod's network: the NIC found
// by the MAC it had (fromMAC) takes the target pod's MAC and addresses.
// Its memory moved, so its hostname, machine ID and keys stay its own.
// One ip command a step, as busybox's ip (no -batch) runs them too.
func ReaddressScript(fromMAC, mac string, addrs []Address) (string, error) {
	id := Identity{TemplateMAC: fromMAC, MAC: mac, Addresses: addrs}
	if err := id.checkNIC(); err != nil {
		return "", err
	}
	if fromMAC == "" {
		return "", fmt.Errorf("readdress: no MAC to find the guest's NIC by")
	}
	var b strings.Builder
	fmt.Fprintf(&b, `set -eu
nic=
for d in /sys/class/net/*; do
	read -r mac <"$d/address" && [ "$mac" = %[1]s ] && nic=${d##*/}
done
[ -n "$nic" ] || { echo "no NIC with MAC %[1]s" >&2; exit 1; }
ip link set dev "$nic" down
ip link set dev "$nic" address %[2]s
ip addr flush dev "$nic"
ip link set dev "$nic" up
`, fromMAC, mac)
	for _, a := range addrs {
		if net.ParseIP(a.IP).To4() == nil { // the pod's by its IPAM: no duplicate detection
			fmt.Fprintf(&b, "ip addr add %[1]s/%[2]d dev \"$nic\" nodad 2>/dev/null || ip addr add %[1]s/%[2]d dev \"$nic\"\n", a.IP, a.PrefixLen)
		} else {
			fmt.Fprintf(&b, "ip addr add %s/%d dev \"$nic\"\n", a.IP, a.PrefixLen)
		}
		if a.Gateway != "" {
			fmt.Fprintf(&b, "ip route replace default via %s dev \"$nic\"\n", a.Gateway)
		}
	}
	return b.String(), nil
}
