package podnet

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// CNI 1.1 gave the runtime two verbs: STATUS (may new pods be added to
// the network?) and GC (these are the attachments that live; drop the
// rest). A network whose config declares an older cniVersion gets
// neither, as before 1.1: it is ready, and nothing is collected.

// cniRunner is the part of libcni the manager calls (a fake in tests).
type cniRunner interface {
	AddNetworkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error)
	DelNetworkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error
	GCNetworkList(ctx context.Context, list *libcni.NetworkConfigList, args *libcni.GCArgs) error
	GetStatusNetworkList(ctx context.Context, list *libcni.NetworkConfigList) error
}

// ErrNetworkNotReady wraps the plugin's answer to STATUS.
var ErrNetworkNotReady = errors.New("CNI network not ready")

// speaks11 says whether the network's config is CNI 1.1 or later; an
// older one is logged once per network and version.
func (m *Manager) speaks11(list *libcni.NetworkConfigList) bool {
	ok, err := version.GreaterThanOrEqualTo(list.CNIVersion, "1.1.0")
	if err == nil && ok {
		return true
	}
	key := list.Name + "@" + list.CNIVersion
	m.mu.Lock()
	seen := m.oldNetworks[key]
	m.oldNetworks[key] = true
	m.mu.Unlock()
	if !seen {
		m.log.Info("CNI network config predates CNI 1.1: no STATUS (always ready) and no GC",
			"network", list.Name, "cniVersion", list.CNIVersion)
	}
	return false
}

// Status asks the node's network (the conf dir's first config, the one a
// new pod would get) whether it is ready; nil is ready. The error names
// the network and carries the plugin's message.
func (m *Manager) Status(ctx context.Context) error {
	list, _, err := loadConfig(m.cfg.ConfDir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNetworkNotReady, err)
	}
	if !m.speaks11(list) {
		return nil
	}
	// One plugin at a time (libcni asks them in order and stops at the
	// first failure the same way), so the error names the plugin.
	for _, p := range list.Plugins {
		one := *list
		one.Plugins = []*libcni.PluginConfig{p}
		if err := m.cni.GetStatusNetworkList(ctx, &one); err != nil {
			return fmt.Errorf("%w: network %s: plugin %s: %v", ErrNetworkNotReady, list.Name, p.Network.Type, err)
		}
	}
	return nil
}

// GC tells the node's network which attachments live: the sandboxes live
// returns, and every one with an ADD or DEL in flight (inflight.go). A
// failing live skips the round: a short list would release live
// addresses. It returns how many attachments were named.
func (m *Manager) GC(ctx context.Context, live func(context.Context) ([]string, error)) (int, error) {
	list, _, err := loadConfig(m.cfg.ConfDir)
	if err != nil {
		return 0, err
	}
	if !m.speaks11(list) {
		return 0, nil
	}
	var n int
	err = m.inflight.round(func(busy []string) error {
		ids, err := live(ctx)
		if err != nil {
			return fmt.Errorf("CNI GC (network %s) skipped: list of live attachments: %w", list.Name, err)
		}
		valid := attachmentsOf(append(ids, busy...))
		n = len(valid)
		if err := m.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			return fmt.Errorf("CNI GC (network %s): %w", list.Name, err)
		}
		return nil
	})
	return n, err
}

// attachmentsOf is the GC list of sandbox IDs: each pod's eth0, as ADD
// ran it (for VM pods and for containerd's pods alike), once each.
func attachmentsOf(ids []string) []types.GCAttachment {
	seen := map[string]bool{}
	out := make([]types.GCAttachment, 0, len(ids))
	for _, id := range ids {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, types.GCAttachment{ContainerID: id, IfName: ifName})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ContainerID < out[j].ContainerID })
	return out
}
