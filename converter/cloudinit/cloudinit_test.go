package cloudinit

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm7pS6YQOJc3b3dX4BDXbO4vQ3ZJx0n2kq3o8sQd6hF user@example"

func TestBuildMergesKeysIntoEveryKindOfUserData(t *testing.T) {
	for _, tc := range []struct {
		name, ud string
		want     []string
	}{
		{"none", "", []string{"#cloud-config\n", "ssh_authorized_keys:", key}},
		{"cloud-config", "#cloud-config\nssh_authorized_keys: [ssh-rsa OLD]\npackages: [htop]\n",
			[]string{"#cloud-config\n", "ssh-rsa OLD", key, "htop"}},
		{"script", "#!/bin/sh\necho hi >/etc/ssh-marker\n",
			[]string{"Content-Type: multipart/mixed", "text/x-shellscript", "echo hi", "text/cloud-config", key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Build(Input{InstanceID: "uid-1", Hostname: "vm-0", UserData: []byte(tc.ud), SSHKeys: []string{key}})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(f["user-data"]), w) {
					t.Errorf("user-data lacks %q:\n%s", w, f["user-data"])
				}
			}
		})
	}
}

func TestMultipartUserDataWithKeysIsRefused(t *testing.T) {
	_, err := Build(Input{InstanceID: "i", UserData: []byte("Content-Type: multipart/mixed; boundary=x\n\n--x--\n"), SSHKeys: []string{key}})
	if err == nil || !strings.Contains(err.Error(), "multipart") {
		t.Fatalf("err = %v", err)
	}
}

// TestMetaDataIsYAMLWhateverTheHostname: a hostile hostname cannot add
// keys to meta-data.
func TestMetaDataIsYAMLWhateverTheHostname(t *testing.T) {
	f, err := Build(Input{InstanceID: "uid\"\ninstance-id: evil", Hostname: "a\nlocal-hostname: b"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := yaml.Unmarshal(f["meta-data"], &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["instance-id"] != "uid\"\ninstance-id: evil" || m["local-hostname"] != "a\nlocal-hostname: b" {
		t.Fatalf("meta-data = %q", m)
	}
}

func TestNetworkConfig(t *testing.T) {
	f, err := Build(Input{InstanceID: "i", Network: &Network{
		MAC: "02:42:0a:58:4d:05", IP: "10.88.77.5", PrefixLen: 24, Gateway: "10.88.77.1", MTU: 1450,
		Routes: []Route{{Dst: "0.0.0.0/0", GW: "10.88.77.1"}, {Dst: "10.96.0.0/12"}},
		DNS:    []string{"10.96.0.10"}, Search: []string{"ns.svc.cluster.local"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var nc netConfig
	if err := yaml.Unmarshal(f["network-config"], &nc); err != nil {
		t.Fatal(err)
	}
	e := nc.Ethernets["eth0"]
	if nc.Version != 2 || e.Match["macaddress"] != "02:42:0a:58:4d:05" || e.Addresses[0] != "10.88.77.5/24" ||
		e.Gateway4 != "10.88.77.1" || e.MTU != 1450 || len(e.Routes) != 1 || e.Routes[0] != (route{To: "10.96.0.0/12", Via: "10.88.77.1"}) ||
		e.Nameservers.Addresses[0] != "10.96.0.10" || e.Nameservers.Search[0] != "ns.svc.cluster.local" {
		t.Fatalf("network-config:\n%s", f["network-config"])
	}
}

func TestCheckUserData(t *testing.T) {
	for ud, ok := range map[string]bool{
		"#cloud-config\nruncmd: [[ls]]\n":                true,
		"#!/bin/bash\necho\n":                            true,
		"#cloud-config\n[not a mapping":                  false,
		"#cloud-config\n- a list\n":                      false,
		"hello":                                          false,
		"#cloud-config\n" + "\xff\xfe":                   false,
		"#!/bin/sh\n" + strings.Repeat("x", MaxUserData): false,
	} {
		if err := CheckUserData([]byte(ud)); (err == nil) != ok {
			t.Errorf("CheckUserData(%.30q) = %v", ud, err)
		}
	}
}

func TestParseSSHKeys(t *testing.T) {
	keys, err := ParseSSHKeys("\n# mine\n" + key + "\n\n")
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Fatalf("keys %q, err %v", keys, err)
	}
	for _, bad := range []string{"not a key", "ssh-rsa !!!", key + "\nssh-ed25519 AAAA"} {
		if _, err := ParseSSHKeys(bad); err == nil || !strings.Contains(err.Error(), "not an SSH public key") {
			t.Errorf("ParseSSHKeys(%q) = %v", bad, err)
		}
	}
	if _, err := ParseSSHKeys(strings.Repeat(key+"\n", MaxSSHKeys+1)); err == nil {
		t.Error("too many keys accepted")
	}
}

// TestNetworkConfigDualStackAndIPv6Only: every address, a gateway per
// family, each family's routes through its own gateway.
func TestNetworkConfigDualStackAndIPv6Only(t *testing.T) {
	for name, tc := range map[string]struct {
		n                  Network
		addrs, routes      string
		gateway4, gateway6 string
	}{
		"dual stack": {
			n: Network{MAC: "02:42:0a:58:4d:05", IP: "10.88.77.5", PrefixLen: 24, Gateway: "10.88.77.1",
				AdditionalIPs: []Address{{IP: "fd00:88:77::5", PrefixLen: 64, Gateway: "fd00:88:77::1"}},
				Routes:        []Route{{Dst: "0.0.0.0/0"}, {Dst: "::/0"}, {Dst: "fd00:96::/108"}}},
			addrs: "10.88.77.5/24 fd00:88:77::5/64", routes: "fd00:96::/108>fd00:88:77::1",
			gateway4: "10.88.77.1", gateway6: "fd00:88:77::1",
		},
		"IPv6 only": {
			n: Network{MAC: "02:42:0a:58:4d:05", IP: "fd00:88:78::5", PrefixLen: 64, Gateway: "fd00:88:78::1",
				Routes: []Route{{Dst: "::/0"}}},
			addrs: "fd00:88:78::5/64", gateway6: "fd00:88:78::1",
		},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := networkConfig(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			var nc netConfig
			if err := yaml.Unmarshal(b, &nc); err != nil {
				t.Fatal(err)
			}
			e := nc.Ethernets["eth0"]
			var routes []string
			for _, r := range e.Routes {
				routes = append(routes, r.To+">"+r.Via)
			}
			if strings.Join(e.Addresses, " ") != tc.addrs || strings.Join(routes, " ") != tc.routes ||
				e.Gateway4 != tc.gateway4 || e.Gateway6 != tc.gateway6 {
				t.Fatalf("network-config:\n%s", b)
			}
		})
	}
	if _, err := networkConfig(Network{MAC: "02:42:0a:58:4d:05", IP: "10.88.77.5", PrefixLen: 64}); err == nil {
		t.Fatal("an IPv4 address with a 64-bit prefix was accepted")
	}
}
