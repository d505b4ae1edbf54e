package podnet

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// bandwidthConflist is the bed's kind of network with the bandwidth
// plugin chained, as Kubernetes' reference configs have it.
const bandwidthConflist = `{"cniVersion":"1.1.0","name":"pods","plugins":[
 {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}},
 {"type":"bandwidth","capabilities":{"bandwidth":true}}]}`

// recordingExec stands in for the plugins: it keeps what each was given
// on stdin; bridge answers with an address, the others pass the previous
// result on.
type recordingExec struct{ stdin map[string][]byte }

func (e *recordingExec) ExecPlugin(_ context.Context, path string, stdin []byte, _ []string) ([]byte, error) {
	e.stdin[filepath.Base(path)] = stdin
	if filepath.Base(path) != "bridge" {
		var conf struct {
			PrevResult json.RawMessage `json:"prevResult"`
		}
		err := json.Unmarshal(stdin, &conf)
		return conf.PrevResult, err
	}
	idx := 2
	res := &types100.Result{CNIVersion: "1.1.0",
		Interfaces: []*types100.Interface{{Name: "cni0"}, {Name: "veth1"}, {Name: "eth0", Sandbox: "/netns/x"}},
		IPs:        []*types100.IPConfig{{Interface: &idx, Address: net.IPNet{IP: net.ParseIP("10.1.0.7"), Mask: net.CIDRMask(24, 32)}}}}
	return json.Marshal(res)
}

func (e *recordingExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/plugins/" + plugin, nil
}

func (e *recordingExec) Decode(b []byte) (version.PluginInfo, error) {
	return version.PluginSupports("1.1.0"), nil
}

// TestBandwidthReachesThePlugin: a pod's bandwidth reaches the plugin
// that has the capability as runtimeConfig.bandwidth, in bits per second
// with containerd's burst, only the ways that are limited; a pod without
// any gives it none. Port mappings still reach portmap alongside.
func TestBandwidthReachesThePlugin(t *testing.T) {
	list, err := libcni.NetworkConfFromBytes([]byte(bandwidthConflist))
	if err != nil {
		t.Fatal(err)
	}
	ports := []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
	for _, tc := range []struct {
		name string
		bw   Bandwidth
		want map[string]uint64 // nil: no runtimeConfig.bandwidth
	}{
		{"none", Bandwidth{}, nil},
		{"ingress", Bandwidth{Ingress: 10_000_000}, map[string]uint64{"ingressRate": 10_000_000, "ingressBurst": math.MaxUint32}},
		{"both", Bandwidth{Ingress: 1000, Egress: 5_000_000}, map[string]uint64{"ingressRate": 1000, "ingressBurst": math.MaxUint32,
			"egressRate": 5_000_000, "egressBurst": math.MaxUint32}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &recordingExec{stdin: map[string][]byte{}}
			cni := libcni.NewCNIConfigWithCacheDir([]string{"/plugins"}, t.TempDir(), ex)
			pod := &Pod{SandboxID: "sb1", Namespace: "ns", Name: "vm", UID: "u", Ports: ports, Bandwidth: tc.bw}
			if _, err := cni.AddNetworkList(context.Background(), list, pod.runtimeConf("/netns/x", ifName)); err != nil {
				t.Fatal(err)
			}
			var bw struct {
				RuntimeConfig struct {
					Bandwidth map[string]uint64 `json:"bandwidth"`
				} `json:"runtimeConfig"`
			}
			if err := json.Unmarshal(ex.stdin["bandwidth"], &bw); err != nil {
				t.Fatal(err)
			}
			if got := bw.RuntimeConfig.Bandwidth; mustJSON(got) != mustJSON(tc.want) {
				t.Fatalf("bandwidth's runtimeConfig.bandwidth = %v, want %v", got, tc.want)
			}
			var pm struct {
				RuntimeConfig struct {
					PortMappings []map[string]any `json:"portMappings"`
				} `json:"runtimeConfig"`
			}
			if err := json.Unmarshal(ex.stdin["portmap"], &pm); err != nil || len(pm.RuntimeConfig.PortMappings) != 1 {
				t.Fatalf("portmap's runtimeConfig: %s (%v)", ex.stdin["portmap"], err)
			}
		})
	}
}
