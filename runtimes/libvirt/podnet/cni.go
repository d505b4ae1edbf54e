package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// confExtensions are the config files containerd's CNI loader reads.
var confExtensions = []string{".conf", ".conflist", ".json"}

// ErrNoConfig is returned when the conf dir holds no network config.
var ErrNoConfig = errors.New("no CNI network config")

// loadConfig returns the node's network: the first config file of dir in
// name order (containerd's choice with max_conf_num = 1), as a self-
// contained config list (plugins inlined), and its bytes to keep.
func loadConfig(dir string) (*libcni.NetworkConfigList, []byte, error) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, nil, fmt.Errorf("read CNI conf dir %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%w in %s", ErrNoConfig, dir)
	}
	sort.Strings(files)
	var list *libcni.NetworkConfigList
	if filepath.Ext(files[0]) == ".conflist" {
		list, err = libcni.NetworkConfFromFile(files[0])
	} else {
		var b []byte
		var one *libcni.PluginConfig
		if b, err = os.ReadFile(files[0]); err == nil {
			if one, err = libcni.NetworkPluginConfFromBytes(b); err == nil {
				list, err = libcni.ConfListFromConf(one)
			}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("CNI config %s: %w", files[0], err)
	}
	b, err := inlined(list)
	if err != nil {
		return nil, nil, fmt.Errorf("CNI config %s: %w", files[0], err)
	}
	list, err = libcni.NetworkConfFromBytes(b)
	return list, b, err
}

// inlined serialises list with every plugin written into it, so the kept
// copy needs no other file to be read again.
func inlined(list *libcni.NetworkConfigList) ([]byte, error) {
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		return nil, err
	}
	plugins := make([]json.RawMessage, len(list.Plugins))
	for i, p := range list.Plugins {
		plugins[i] = p.Bytes
	}
	var err error
	if raw["plugins"], err = json.Marshal(plugins); err != nil {
		return nil, err
	}
	raw["loadOnlyInlinedPlugins"] = json.RawMessage("true")
	return json.Marshal(raw)
}

// runtimeConf is the CNI invocation for a pod, as containerd makes it.
func (p *Pod) runtimeConf(netns, ifName string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: p.SandboxID,
		NetNS:       netns,
		IfName:      ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.SandboxID},
			{"K8S_POD_UID", p.UID},
		},
	}
	caps := map[string]any{}
	if len(p.Ports) > 0 {
		ports := make([]map[string]any, 0, len(p.Ports))
		for _, m := range p.Ports {
			ports = append(ports, map[string]any{
				"hostPort": m.HostPort, "containerPort": m.ContainerPort,
				"protocol": m.Protocol, "hostIP": m.HostIP,
			})
		}
		caps["portMappings"] = ports
	}
	if bw := p.Bandwidth.capability(); bw != nil {
		caps["bandwidth"] = bw
	}
	if len(caps) > 0 {
		rt.CapabilityArgs = caps
	}
	return rt
}

// unlimitedBurst is the burst, in bits, containerd gives every rate it
// passes (kubelet's annotations have none): the bandwidth plugin's
// largest (its burst in bytes must stay under 4 GiB).
const unlimitedBurst = math.MaxUint32

// capability is the bandwidth capability's runtimeConfig (the bandwidth
// plugin's BandwidthEntry), nil when neither way is limited.
func (b Bandwidth) capability() map[string]uint64 {
	if b.Ingress == 0 && b.Egress == 0 {
		return nil
	}
	bw := map[string]uint64{}
	if b.Ingress > 0 {
		bw["ingressRate"], bw["ingressBurst"] = b.Ingress, unlimitedBurst
	}
	if b.Egress > 0 {
		bw["egressRate"], bw["egressBurst"] = b.Egress, unlimitedBurst
	}
	return bw
}

// add runs CNI ADD.
func (m *Manager) add(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	res, err := m.cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		return nil, fmt.Errorf("CNI ADD (network %s): %w", list.Name, err)
	}
	return res, nil
}

// del runs CNI DEL with the kept config.
func (m *Manager) del(ctx context.Context, conf []byte, rt *libcni.RuntimeConf) error {
	list, err := libcni.NetworkConfFromBytes(conf)
	if err != nil {
		return fmt.Errorf("kept CNI config: %w", err)
	}
	if err := m.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("CNI DEL (network %s): %w", list.Name, err)
	}
	return nil
}
