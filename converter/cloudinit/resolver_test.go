package cloudinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// kubeletDNS is a ClusterFirst pod's network, as kubelet gives its DNS.
func kubeletDNS() *Network {
	return &Network{
		MAC: "02:42:0a:58:4d:05", IP: "10.88.77.5", PrefixLen: 24, Gateway: "10.88.77.1",
		DNS: []string{"10.96.0.10"}, Search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"},
	}
}

const kubeletResolvConf = "# The pod's DNS config (servers, searches, options), written by crimux's cloud-init vendor-data at every boot.\n" +
	"nameserver 10.96.0.10\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"

// TestResolverInVendorData: a pod whose DNS config has options gets
// vendor-data whose bootcmd writes the pod's resolv.conf (the file an
// argument, never shell text), after the shares' mounts; without options
// or without name servers, nothing is written.
func TestResolverInVendorData(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(n *Network)
		mount bool
		want  string // the resolv.conf written; "" none
	}{
		{"kubelet's ClusterFirst pod", func(*Network) {}, false, kubeletResolvConf},
		{"after the mounts", func(*Network) {}, true, kubeletResolvConf},
		{"no options: the guest's own", func(n *Network) { n.Options = nil }, false, ""},
		{"no name servers: the guest's own", func(n *Network) { n.DNS = nil }, false, ""},
		{"no option left a word: the guest's own", func(n *Network) { n.Options = []string{"", "nd ots:5"} }, false, ""},
		{"no search domains", func(n *Network) { n.Search = nil; n.Options = []string{"ndots:2", "timeout:1"} }, false,
			"# The pod's DNS config (servers, searches, options), written by crimux's cloud-init vendor-data at every boot.\n" +
				"nameserver 10.96.0.10\noptions ndots:2 timeout:1\n"},
		{"a word that would start a line is dropped", func(n *Network) { n.Options = append(n.Options, "edns0\nnameserver 6.6.6.6", "") },
			false, kubeletResolvConf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := kubeletDNS()
			tc.edit(n)
			in := Input{InstanceID: "uid", Network: n}
			if tc.mount {
				in.Mounts = testMounts[:1]
			}
			f, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct{ Bootcmd [][]string }
			if err := yaml.Unmarshal(f["vendor-data"], &doc); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range doc.Bootcmd {
				if len(c) == 6 && c[3] == "crimux-resolv" {
					got = c
				}
			}
			if tc.want == "" {
				if got != nil {
					t.Fatalf("bootcmd writes a resolv.conf: %q", got)
				}
				return
			}
			if got == nil || got[2] != resolverScript || got[4] != tc.want || got[5] != "/etc/resolv.conf" {
				t.Fatalf("bootcmd %q, want the resolver's writing\n%s", doc.Bootcmd, tc.want)
			}
			if tc.mount && doc.Bootcmd[0][3] != "crimux-mount" {
				t.Fatalf("bootcmd %q, want the mounts first", doc.Bootcmd)
			}
		})
	}
}

// TestResolverMergedIntoUserBootcmd: a user-data with its own bootcmd
// (which would replace vendor-data's) still gets the resolver, first.
func TestResolverMergedIntoUserBootcmd(t *testing.T) {
	f, err := Build(Input{InstanceID: "uid", Network: kubeletDNS(), UserData: []byte("#cloud-config\nbootcmd:\n  - echo mine\n")})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Bootcmd []any }
	if err := yaml.Unmarshal(f["user-data"], &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Bootcmd) != 2 || doc.Bootcmd[1] != "echo mine" {
		t.Fatalf("user bootcmd: %#v", doc.Bootcmd)
	}
}

// TestResolverScriptReplacesALink: the script, run as cloud-init runs a
// bootcmd, replaces a resolv.conf that is systemd-resolved's link with
// a file of the pod's (the link's target, its owner's, untouched), and
// writes text with quotes and $ as it is.
func TestResolverScriptReplacesALink(t *testing.T) {
	dir := t.TempDir()
	stub, path := filepath.Join(dir, "stub-resolv.conf"), filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(stub, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stub, path); err != nil {
		t.Fatal(err)
	}
	text := kubeletResolvConf + "# '$(touch " + dir + "/pwned)' \"$1\"\n"
	for range 2 { // every boot
		if out, err := exec.Command("sh", "-c", resolverScript, "crimux-resolv", text, path).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("resolv.conf: %v, %v; want a regular file, 0644", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != text {
		t.Fatalf("resolv.conf:\n%s\nwant\n%s", b, text)
	}
	if b, _ := os.ReadFile(stub); string(b) != "nameserver 127.0.0.53\n" {
		t.Fatalf("the link's target changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("the text was run as shell")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.crimux")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
