package podnet

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

const testConflist = `{"cniVersion":"1.0.0","name":"pods","plugins":[
 {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}`

func writeConf(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfigTakesTheFirstFileAndInlinesIt(t *testing.T) {
	dir := t.TempDir()
	writeConf(t, dir, "20-other.conflist", `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"ptp"}]}`)
	writeConf(t, dir, "10-pods.conflist", testConflist)
	writeConf(t, dir, "README", "not a config")
	list, kept, err := loadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "pods" || len(list.Plugins) != 2 || list.Plugins[1].Network.Type != "portmap" {
		t.Fatalf("list = %+v", list)
	}
	// The kept bytes stand alone: the same network, plugins inlined.
	again, err := libcni.NetworkConfFromBytes(kept)
	if err != nil || again.Name != "pods" || len(again.Plugins) != 2 || !again.LoadOnlyInlinedPlugins {
		t.Fatalf("kept config reparsed: %+v, %v", again, err)
	}
}

func TestLoadConfigUpgradesASingleConf(t *testing.T) {
	dir := t.TempDir()
	writeConf(t, dir, "99-loopback.conf", `{"cniVersion":"1.0.0","name":"lo","type":"loopback"}`)
	list, _, err := loadConfig(dir)
	if err != nil || list.Name != "lo" || len(list.Plugins) != 1 {
		t.Fatalf("list = %+v, %v", list, err)
	}
}

func TestLoadConfigWithoutAnyNamesTheDir(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "absent")} {
		_, _, err := loadConfig(dir)
		if !errors.Is(err, ErrNoConfig) {
			t.Fatalf("%s: err = %v, want ErrNoConfig", dir, err)
		}
	}
	dir := t.TempDir()
	writeConf(t, dir, "10-bad.conflist", `{"plugins":[]}`)
	if _, _, err := loadConfig(dir); err == nil || !strings.Contains(err.Error(), "10-bad.conflist") {
		t.Fatalf("broken config: err = %v, want one naming the file", err)
	}
}

func TestAddressingOfABridgeResult(t *testing.T) {
	idx := 2
	_, def, _ := net.ParseCIDR("0.0.0.0/0")
	res := &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{
			{Name: "cni0"}, {Name: "veth1234"}, {Name: "eth0", Sandbox: "/run/crimux/netns/x_1"},
		},
		IPs: []*types100.IPConfig{{
			Interface: &idx, Address: net.IPNet{IP: net.ParseIP("10.1.0.7"), Mask: net.CIDRMask(24, 32)},
			Gateway: net.ParseIP("10.1.0.1"),
		}},
	}
	res.Routes = append(res.Routes, &types.Route{Dst: *def}) // default route, gateway from the IP config
	a, err := addressingOf(res, "/run/crimux/netns/x_1", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	want := addressing{Address: Address{IP: "10.1.0.7", PrefixLen: 24, Gateway: "10.1.0.1"}, Routes: []Route{{Dst: "0.0.0.0/0"}}, HostVeth: "veth1234"}
	if b1, b2 := mustJSON(a), mustJSON(want); b1 != b2 {
		t.Fatalf("addressing = %s\nwant %s", b1, b2)
	}
	if _, err := addressingOf(&types100.Result{CNIVersion: "1.0.0"}, "/x", "eth0"); err == nil {
		t.Fatal("a result without an address was accepted")
	}
	// The bandwidth plugin, chained after bridge, appends its ifb (egress
	// shaping) outside the pod: the veth is still the pod's host side.
	res.Interfaces = append(res.Interfaces, &types100.Interface{Name: "bwp1234abcd"})
	if a, err := addressingOf(res, "/run/crimux/netns/x_1", "eth0"); err != nil || a.HostVeth != "veth1234" {
		t.Fatalf("host veth with an ifb after the pod's interface: %q (%v), want veth1234", a.HostVeth, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
