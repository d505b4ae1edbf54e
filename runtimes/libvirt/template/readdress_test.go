package template

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	sourceMAC = "52:54:00:00:00:01"
	podMAC    = "52:54:00:12:34:56"
)

func podAddresses() []Address {
	return []Address{{IP: "10.88.0.7", PrefixLen: 16, Gateway: "10.88.0.1"}, {IP: "fd00:88:77::7", PrefixLen: 64, Gateway: "fd00:88:77::1"}}
}

// TestReaddressScript: the script finds the NIC by the MAC the guest had
// on its source, gives it the pod's MAC and addresses (an IPv6 one
// without duplicate detection, and again with it where ip knows no
// nodad) and their default routes; it is valid sh.
func TestReaddressScript(t *testing.T) {
	s, err := ReaddressScript(sourceMAC, podMAC, podAddresses())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`set -eu`, `for d in /sys/class/net/*; do`, `[ "$mac" = 52:54:00:00:00:01 ] && nic=`,
		`ip link set dev "$nic" address 52:54:00:12:34:56`, `ip addr flush dev "$nic"`,
		"ip addr add 10.88.0.7/16 dev \"$nic\"\n", `ip route replace default via 10.88.0.1 dev "$nic"`,
		`ip addr add fd00:88:77::7/64 dev "$nic" nodad 2>/dev/null || ip addr add fd00:88:77::7/64 dev "$nic"` + "\n",
		`ip route replace default via fd00:88:77::1 dev "$nic"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "10.88.0.7/16 dev \"$nic\" nodad") {
		t.Errorf("an IPv4 address is added with nodad:\n%s", s)
	}
	for _, notHere := range []string{"hostname", "machine-id", "ssh"} {
		if strings.Contains(s, notHere) {
			t.Errorf("the script changes the guest's %s: a migrated guest keeps its own:\n%s", notHere, s)
		}
	}
	if out, err := exec.Command("/bin/sh", "-n", "-c", s).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
}

// TestReaddressScriptRefuses what it could not put safely into a shell,
// and a guest NIC it has no MAC to find by.
func TestReaddressScriptRefuses(t *testing.T) {
	cases := []struct {
		name, from, mac string
		addrs           []Address
	}{
		{"no source MAC", "", podMAC, podAddresses()},
		{"no source MAC, no pod MAC", "", "", nil},
		{"source MAC upper case", "52:54:00:AA:00:01", podMAC, podAddresses()},
		{"pod MAC upper case", sourceMAC, "52:54:00:12:34:5F", podAddresses()},
		{"pod MAC short", sourceMAC, "52:54:00:12:34", podAddresses()},
		{"pod MAC of 8 bytes", sourceMAC, "52:54:00:12:34:56:78:9a", podAddresses()},
		{"pod MAC with a command", sourceMAC, "52:54:00:12:34:56;reboot", podAddresses()},
		{"pod MAC empty", sourceMAC, "", nil},
		{"address not an IP", sourceMAC, podMAC, []Address{{IP: "$(reboot)", PrefixLen: 24}}},
		{"IPv4 prefix too long", sourceMAC, podMAC, []Address{{IP: "10.0.0.1", PrefixLen: 33}}},
		{"IPv6 prefix too long", sourceMAC, podMAC, []Address{{IP: "fd00::1", PrefixLen: 129}}},
		{"prefix zero", sourceMAC, podMAC, []Address{{IP: "10.0.0.1", PrefixLen: 0}}},
		{"gateway not an IP", sourceMAC, podMAC, []Address{{IP: "10.0.0.1", PrefixLen: 24, Gateway: "`reboot`"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if s, err := ReaddressScript(c.from, c.mac, c.addrs); err == nil {
				t.Fatalf("no error; script:\n%s", s)
			}
		})
	}
}

// guestNet is a guest's /sys/class/net in a temporary directory, with
// an ip command that only records its arguments.
type guestNet struct {
	sys, bin, log string
}

// newGuestNet makes NICs (name -> MAC) and a sysfs entry that is no NIC
// (bonding_masters, a file), as a guest's sysfs has.
func newGuestNet(t *testing.T, nics map[string]string) guestNet {
	t.Helper()
	dir := t.TempDir()
	g := guestNet{sys: filepath.Join(dir, "class", "net"), bin: filepath.Join(dir, "bin"), log: filepath.Join(dir, "ip.log")}
	for name, mac := range nics {
		if err := os.MkdirAll(filepath.Join(g.sys, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g.sys, name, "address"), []byte(mac+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(g.sys, "bonding_masters"), []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The fake ip fails on nodad when NODAD_FAILS is set, as an ip
	// without it (busybox's) does.
	fake := `#!/bin/sh
printf '%s\n' "$*" >>"$IP_LOG"
case "$*" in *nodad*) [ -z "${NODAD_FAILS:-}" ] || { echo "ip: either local is duplicate or nodad is garbage" >&2; exit 1; } ;; esac
exit 0
`
	if err := os.MkdirAll(g.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.bin, "ip"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	return g
}

// run runs script with /bin/sh against the fake sysfs and ip (PATH holds
// only the fake: the host's ip is out of reach); it returns the ip
// command lines run, stderr and the error.
func (g guestNet) run(t *testing.T, script string, env ...string) (ipLines []string, stderr string, err error) {
	t.Helper()
	const sysNet = "/sys/class/net/*"
	if !strings.Contains(script, sysNet) {
		t.Fatalf("the script does not look in %s:\n%s", sysNet, script)
	}
	cmd := exec.Command("/bin/sh", "-c", strings.ReplaceAll(script, sysNet, g.sys+"/*"))
	cmd.Env = append([]string{"PATH=" + g.bin, "IP_LOG=" + g.log}, env...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	err = cmd.Run()
	b, readErr := os.ReadFile(g.log)
	if readErr != nil && !os.IsNotExist(readErr) {
		t.Fatal(readErr)
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		ipLines = strings.Split(s, "\n")
	}
	return ipLines, errBuf.String(), err
}

// TestReaddressScriptRuns: run by sh in a guest with several NICs, the
// script changes the one with the source's MAC, and only it: down, the
// pod's MAC, the old addresses flushed, up, then the pod's addresses and
// routes, in that order.
func TestReaddressScriptRuns(t *testing.T) {
	g := newGuestNet(t, map[string]string{"enp1s0": "52:54:00:aa:bb:cc", "eth0": sourceMAC, "lo": "00:00:00:00:00:00"})
	s, err := ReaddressScript(sourceMAC, podMAC, podAddresses())
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := g.run(t, s)
	if err != nil {
		t.Fatalf("the script failed: %v\nstderr: %s\nip ran: %q", err, stderr, got)
	}
	want := []string{
		"link set dev eth0 down",
		"link set dev eth0 address 52:54:00:12:34:56",
		"addr flush dev eth0",
		"link set dev eth0 up",
		"addr add 10.88.0.7/16 dev eth0",
		"route replace default via 10.88.0.1 dev eth0",
		"addr add fd00:88:77::7/64 dev eth0 nodad",
		"route replace default via fd00:88:77::1 dev eth0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ip ran:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReaddressScriptWithoutNodad: where ip refuses nodad, the IPv6
// address is added with duplicate detection instead, and the script
// goes on to its route.
func TestReaddressScriptWithoutNodad(t *testing.T) {
	g := newGuestNet(t, map[string]string{"eth0": sourceMAC})
	s, err := ReaddressScript(sourceMAC, podMAC, podAddresses()[1:])
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := g.run(t, s, "NODAD_FAILS=1")
	if err != nil {
		t.Fatalf("the script failed: %v\nstderr: %s\nip ran: %q", err, stderr, got)
	}
	tail := strings.Join(got[len(got)-3:], "\n")
	if want := "addr add fd00:88:77::7/64 dev eth0 nodad\naddr add fd00:88:77::7/64 dev eth0\nroute replace default via fd00:88:77::1 dev eth0"; tail != want {
		t.Fatalf("ip ran, last:\n%s\nwant:\n%s", tail, want)
	}
	if strings.Contains(stderr, "nodad is garbage") {
		t.Errorf("the refused nodad's error reached stderr: %s", stderr)
	}
}

// TestReaddressScriptNoSuchNIC: a guest with no NIC of the source's MAC
// changes nothing and fails, saying which MAC it looked for.
func TestReaddressScriptNoSuchNIC(t *testing.T) {
	g := newGuestNet(t, map[string]string{"eth0": "52:54:00:aa:bb:cc"})
	s, err := ReaddressScript(sourceMAC, podMAC, podAddresses())
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := g.run(t, s)
	if err == nil || !strings.Contains(stderr, "no NIC with MAC "+sourceMAC) {
		t.Fatalf("err %v, stderr %q: want a failure naming %s", err, stderr, sourceMAC)
	}
	if len(got) != 0 {
		t.Fatalf("ip ran with no NIC found: %q", got)
	}
}
