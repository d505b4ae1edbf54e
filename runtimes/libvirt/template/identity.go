package template

import (
	"fmt"
	"net"
	"regexp"
	"strings"
)

// Identity is what a clone makes its own in its guest once restored (its
// VM generation ID is new already: libvirt makes one at every restore,
// and the guest's kernel reseeds its RNG on it; its clock is set through
// the agent). Firecracker's snapshot documentation and cloud-init's idea
// of a new instance ask for the rest: a network identity of its own (its
// pod's MAC and addresses), its hostname, machine ID and SSH host keys,
// then cloud-init's per-instance stages for the pod's instance ID.
type Identity struct {
	Hostname string
	// MachineID is 32 lowercase hex digits (systemd's machine-id(5)).
	MachineID string
	// TemplateMAC is the MAC the guest's NIC has from the template's
	// saved state; MAC is the pod's, which crimux's DHCP and the pod
	// network know.
	TemplateMAC, MAC string
	// Addresses are the pod's, each with its prefix length and gateway.
	Addresses []Address
	// Seed is entropy from the host (at least MinSeed bytes), mixed into
	// the guest's input pool before anything else, its RNG then reseeded:
	// every clone starts from the template's RNG state, and a guest kernel
	// without a VM generation ID driver (Debian 12's cloud kernel) would
	// go on from it.
	Seed []byte
}

// MinSeed is the least entropy a clone is given, in bytes.
const MinSeed = 32

// Address is one of the pod's addresses.
type Address struct {
	IP        string
	PrefixLen int
	Gateway   string
}

var (
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	machineRE  = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// Check refuses what the script would not put safely into a shell.
func (id Identity) Check() error {
	if len(id.Hostname) > 253 || !hostnameRE.MatchString(id.Hostname) {
		return fmt.Errorf("clone identity: hostname %q is not a DNS name", id.Hostname)
	}
	if !machineRE.MatchString(id.MachineID) {
		return fmt.Errorf("clone identity: machine ID %q is not 32 hex digits", id.MachineID)
	}
	if len(id.Seed) < MinSeed {
		return fmt.Errorf("clone identity: a seed of %d bytes, fewer than %d", len(id.Seed), MinSeed)
	}
	return id.checkNIC()
}

// checkNIC refuses MACs and addresses the script would not put safely
// into a shell.
func (id Identity) checkNIC() error {
	if id.TemplateMAC == "" && id.MAC == "" { // a VM without a NIC
		if len(id.Addresses) > 0 {
			return fmt.Errorf("clone identity: addresses without a NIC")
		}
		return nil
	}
	for _, mac := range []string{id.TemplateMAC, id.MAC} {
		if hw, err := net.ParseMAC(mac); err != nil || len(hw) != 6 || hw.String() != mac {
			return fmt.Errorf("clone identity: MAC %q is not a lowercase Ethernet address", mac)
		}
	}
	for _, a := range id.Addresses {
		ip := net.ParseIP(a.IP)
		bits := 128
		if ip.To4() != nil {
			bits = 32
		}
		if ip == nil || a.PrefixLen < 1 || a.PrefixLen > bits || (a.Gateway != "" && net.ParseIP(a.Gateway) == nil) {
			return fmt.Errorf("clone identity: address %s/%d via %q", a.IP, a.PrefixLen, a.Gateway)
		}
	}
	return nil
}

// Script is the shell script (POSIX sh, run as root through the guest
// agent) that makes a restored clone id. The values are checked (Check)
// and none needs quoting; the NIC is found by the template's MAC, whatever
// its name. What takes long under TCG (an RSA host key, cloud-init's
// per-instance stages, which read the pod's cloud-init volume afresh)
// runs in the background, after the script returns.
func (id Identity) Script() (string, error) {
	if err := id.Check(); err != nil {
		return "", err
	}
	var b strings.Builder
	// RNDADDENTROPY (credited) then RNDRESEEDCRNG, in perl (Debian's
	// perl-base is essential) or python3.
	fmt.Fprintf(&b, `set -eu
seed=%x
if command -v perl >/dev/null; then
	perl -e 'open(my $f, ">", "/dev/random") or die "$!"; my $d = pack("H*", $ARGV[0]); ioctl($f, 0x40085203, pack("ii", 8 * length($d), length($d)) . $d) or die "RNDADDENTROPY: $!"; ioctl($f, 0x5207, 0) or die "RNDRESEEDCRNG: $!"' "$seed"
else
	python3 -c 'import fcntl, struct, sys
d = bytes.fromhex(sys.argv[1])
with open("/dev/random", "wb") as f:
    fcntl.ioctl(f, 0x40085203, struct.pack("ii", 8 * len(d), len(d)) + d)
    fcntl.ioctl(f, 0x5207)' "$seed"
fi
`, id.Seed)
	if id.TemplateMAC != "" {
		id.nicScript(&b)
	}
	id.hostScript(&b)
	return b.String(), nil
}

// nicScript gives the NIC found by the template's MAC the pod's MAC and
// addresses: one ip process (-batch) for all of it.
func (id Identity) nicScript(b *strings.Builder) {
	fmt.Fprintf(b, `nic=
for d in /sys/class/net/*; do
	read -r mac <"$d/address" && [ "$mac" = %s ] && nic=${d##*/}
done
[ -n "$nic" ] || { echo "no NIC with MAC %s" >&2; exit 1; }
ip -batch - <<EOF
link set dev $nic down
link set dev $nic address %s
addr flush dev $nic
link set dev $nic up
`, id.TemplateMAC, id.TemplateMAC, id.MAC)
	// Batch lines take no family option: ip tells it from the address.
	// An IPv6 address is the pod's by its IPAM: no duplicate detection
	// (it would hold the address back for a second).
	for _, a := range id.Addresses {
		nodad := ""
		if net.ParseIP(a.IP).To4() == nil {
			nodad = " nodad"
		}
		fmt.Fprintf(b, "addr add %s/%d dev $nic%s\n", a.IP, a.PrefixLen, nodad)
		if a.Gateway != "" {
			fmt.Fprintf(b, "route replace default via %s dev $nic\n", a.Gateway)
		}
	}
	b.WriteString("EOF\n")
}

// hostScript sets the hostname and the machine ID, removes the
// template's SSH host keys and stops its sshd (which holds them: its
// listener is killed, no new connection meets them), and starts in the
// background what takes long under TCG: new host keys and sshd again,
// then cloud-init's per-instance stages for the pod's instance ID (its
// user-data and SSH keys; network config for later boots; cloud-init
// finds a new instance only once its cache of the template's, in /run
// and in obj.pkl, is gone). Their output goes to CloneLog in the guest.
// Builtins where a process would do: each costs tens of milliseconds
// under TCG.
func (id Identity) hostScript(b *strings.Builder) {
	fmt.Fprintf(b, `echo %[1]s >/proc/sys/kernel/hostname
echo %[1]s >/etc/hostname
echo %[2]s >/etc/machine-id
rm -f /etc/ssh/ssh_host_*
if read -r pid 2>/dev/null </run/sshd.pid; then kill "$pid" 2>/dev/null || true; fi
systemd-run --unit=crimux-clone-instance --no-block sh -c 'exec >>%[3]s 2>&1; blockdev --flushbufs /dev/sr0; ssh-keygen -A && systemctl restart ssh; if command -v cloud-init >/dev/null; then rm -rf /run/cloud-init /var/lib/cloud/instance/obj.pkl; cloud-init init --local && cloud-init init && cloud-init modules --mode=config && cloud-init modules --mode=final; fi; echo "crimux: the clone is its pod instance: $?"' >>%[3]s 2>&1
`, id.Hostname, id.MachineID, CloneLog)
}

// CloneLog is where a clone's guest keeps what its background identity
// steps printed.
const CloneLog = "/var/log/crimux-clone.log"
