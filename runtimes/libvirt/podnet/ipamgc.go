package podnet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
)

// withIPAMGC is libcni plus GC for the IPAM plugins of the network.
//
// The spec has a plugin that delegates IPAM pass GC on to its IPAM
// plugin, as it does ADD and DEL. The reference plugins up to v1.10.0
// do not (bridge, ptp, macvlan ... say "FIXME GC"), while host-local
// implements GC: through a bridge conflist, libcni's GC never reaches
// the addresses. So after GCNetworkList, crimux sends each plugin's IPAM
// the GC its plugin would have sent: the plugin's config with the valid
// attachments injected, CNI_COMMAND=GC. GC is declarative, so a plugin
// that does delegate gets the same GC twice, to no harm.
type withIPAMGC struct {
	*libcni.CNIConfig
	binDirs []string
}

func (c withIPAMGC) GCNetworkList(ctx context.Context, list *libcni.NetworkConfigList, args *libcni.GCArgs) error {
	if list.DisableGC { // the operator's word, as libcni honours it
		return nil
	}
	errs := []error{c.CNIConfig.GCNetworkList(ctx, list, args)}
	for _, p := range list.Plugins {
		if p.Network.IPAM.Type == "" {
			continue
		}
		if err := c.gcIPAM(ctx, list, p, args); err != nil {
			errs = append(errs, fmt.Errorf("GC of IPAM plugin %s (of %s): %w", p.Network.IPAM.Type, p.Network.Type, err))
		}
	}
	return errors.Join(errs...)
}

func (c withIPAMGC) gcIPAM(ctx context.Context, list *libcni.NetworkConfigList, p *libcni.PluginConfig, args *libcni.GCArgs) error {
	conf, err := libcni.InjectConf(p, map[string]any{
		"name": list.Name, "cniVersion": list.CNIVersion,
		"cni.dev/valid-attachments": args.ValidAttachments,
	})
	if err != nil {
		return err
	}
	bin, err := invoke.FindInPath(p.Network.IPAM.Type, c.binDirs)
	if err != nil {
		return err
	}
	// The IPAM plugin reads the "ipam" section of the plugin's config,
	// as when its plugin delegates.
	return invoke.ExecPluginWithoutResult(ctx, bin, conf.Bytes,
		&invoke.Args{Command: "GC", Path: strings.Join(c.binDirs, ":")}, nil)
}
