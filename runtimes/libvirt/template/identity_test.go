package template

import (
	"os/exec"
	"strings"
	"testing"
)

func cloneIdentity() Identity {
	return Identity{Hostname: "web-0", MachineID: "0123456789abcdef0123456789abcdef",
		TemplateMAC: "52:54:00:00:00:01", MAC: "52:54:00:12:34:56",
		Addresses: []Address{{IP: "10.88.0.7", PrefixLen: 16, Gateway: "10.88.0.1"}, {IP: "fd00:88:77::7", PrefixLen: 64, Gateway: "fd00:88:77::1"}},
		Seed:      []byte("0123456789abcdef0123456789abcdef")}
}

// TestIdentityScript: the script finds the NIC by the template's MAC,
// gives it the pod's MAC and addresses, and sets the hostname, machine ID
// and new SSH host keys; it is valid sh.
func TestIdentityScript(t *testing.T) {
	s, err := cloneIdentity().Script()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`= 52:54:00:00:00:01 ] && nic=`, `address 52:54:00:12:34:56`,
		`addr add 10.88.0.7/16 dev $nic`, `route replace default via 10.88.0.1 dev $nic`,
		`addr add fd00:88:77::7/64 dev $nic nodad`, `route replace default via fd00:88:77::1 dev $nic`, `echo web-0 >/proc/sys/kernel/hostname`,
		`echo 0123456789abcdef0123456789abcdef >/etc/machine-id`, `rm -f /etc/ssh/ssh_host_*`, `kill "$pid"`, `ssh-keygen -A`,
		`cloud-init modules --mode=final`, `seed=30313233`, `0x5207`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q:\n%s", want, s)
		}
	}
	if out, err := exec.Command("sh", "-n", "-c", s).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
}

// TestIdentityRefusesWhatAShellWouldRead: a value that is not what it
// claims to be never reaches the script.
func TestIdentityRefusesWhatAShellWouldRead(t *testing.T) {
	for name, edit := range map[string]func(*Identity){
		"hostname with a command": func(id *Identity) { id.Hostname = "a;reboot" },
		"hostname upper case":     func(id *Identity) { id.Hostname = "Web" },
		"machine ID short":        func(id *Identity) { id.MachineID = "abc" },
		"MAC with a space":        func(id *Identity) { id.MAC = "52:54:00:12:34:56 x" },
		"MAC upper case":          func(id *Identity) { id.TemplateMAC = "52:54:00:AA:00:01" },
		"address not an IP":       func(id *Identity) { id.Addresses[0].IP = "$(id)" },
		"prefix too long":         func(id *Identity) { id.Addresses[0].PrefixLen = 33 },
		"gateway not an IP":       func(id *Identity) { id.Addresses[1].Gateway = "`id`" },
		"seed short":              func(id *Identity) { id.Seed = id.Seed[:31] },
	} {
		id := cloneIdentity()
		edit(&id)
		if _, err := id.Script(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestIdentityScriptOrder: the RNG is reseeded before any key is made,
// and a VM without a NIC gets no NIC lines.
func TestIdentityScriptOrder(t *testing.T) {
	s, err := cloneIdentity().Script()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Index(s, "0x5207") > strings.Index(s, "ssh-keygen") || strings.Index(s, "0x5207") > strings.Index(s, "machine-id") {
		t.Fatalf("keys are made before the reseed:\n%s", s)
	}
	id := cloneIdentity()
	id.TemplateMAC, id.MAC, id.Addresses = "", "", nil
	if s, err = id.Script(); err != nil || strings.Contains(s, "nic=") {
		t.Fatalf("without a NIC: %v\n%s", err, s)
	}
	id.Addresses = cloneIdentity().Addresses
	if _, err := id.Script(); err == nil {
		t.Fatal("addresses without a NIC: no error")
	}
}
