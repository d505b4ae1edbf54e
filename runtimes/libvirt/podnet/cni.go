package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
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
	if len(p.Ports) > 0 {
		ports := make([]map[string]any, 0, len(p.Ports))
		for _, m := range p.Ports {
			ports = append(ports, map[string]any{
				"hostPort": m.HostPort, "containerPort": m.ContainerPort,
				"protocol": m.Protocol, "hostIP": m.HostIP,
			})
		}
		rt.CapabilityArgs = map[string]any{"portMappings": ports}
	}
	return rt
}

// addressing is what the guest is told over DHCP, from the CNI result.
type addressing struct {
	IP        string  `json:"ip"`
	PrefixLen int     `json:"prefix_len"`
	Gateway   string  `json:"gateway,omitempty"`
	Routes    []Route `json:"routes,omitempty"`
	// HostVeth is the pod's host-side interface (the last one the result
	// lists outside the pod's namespace: the bridge plugin's veth).
	HostVeth string `json:"host_veth,omitempty"`
}

// Route is a route for the guest.
type Route struct {
	Dst string `json:"dst"`
	GW  string `json:"gw,omitempty"`
}

// addressingOf picks the IPv4 address of ifName in netns from a result.
func addressingOf(res types.Result, netns, ifName string) (addressing, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return addressing{}, fmt.Errorf("CNI result: %w", err)
	}
	var a addressing
	for i, itf := range r.Interfaces {
		if itf.Sandbox == "" {
			a.HostVeth = itf.Name // the last host-side one: the bridge plugin's veth
		}
		if itf.Name != ifName || (itf.Sandbox != "" && itf.Sandbox != netns) {
			continue
		}
		for _, ipc := range r.IPs {
			if ipc.Interface == nil || *ipc.Interface != i || ipc.Address.IP.To4() == nil {
				continue
			}
			ones, _ := ipc.Address.Mask.Size()
			a.IP, a.PrefixLen = ipc.Address.IP.String(), ones
			if ipc.Gateway != nil {
				a.Gateway = ipc.Gateway.String()
			}
		}
	}
	if a.IP == "" {
		// Plugins that report IPs without an interface index.
		for _, ipc := range r.IPs {
			if ipc.Interface == nil && ipc.Address.IP.To4() != nil {
				ones, _ := ipc.Address.Mask.Size()
				a.IP, a.PrefixLen = ipc.Address.IP.String(), ones
				if ipc.Gateway != nil {
					a.Gateway = ipc.Gateway.String()
				}
				break
			}
		}
	}
	if a.IP == "" {
		return a, fmt.Errorf("CNI result has no IPv4 address for %s", ifName)
	}
	for _, rt := range r.Routes {
		if rt.Dst.IP.To4() == nil {
			continue
		}
		route := Route{Dst: rt.Dst.String()}
		if rt.GW != nil {
			route.GW = rt.GW.String()
		}
		a.Routes = append(a.Routes, route)
	}
	return a, nil
}

// ipNet parses "ip" and a prefix length.
func ipNet(ip string, prefixLen int) (net.IP, net.IPMask, error) {
	parsed := net.ParseIP(ip).To4()
	if parsed == nil {
		return nil, nil, fmt.Errorf("%q is no IPv4 address", ip)
	}
	return parsed, net.CIDRMask(prefixLen, 32), nil
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
