package cidata

import (
	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// FilesFor makes the cloud-init NoCloud files of pod sb's VM: the instance is
// the pod (its UID; the sandbox ID for a pod without one), the hostname
// the pod's, the network what the pod's CNI result gave the guest; the
// guest mounts each share at its container path.
func FilesFor(sb *store.Sandbox, src cloudinit.Source, shares []vm.Share) (cloudinit.Files, error) {
	cfg := sb.Config
	in := cloudinit.Input{
		InstanceID: cfg.GetMetadata().GetUid(),
		Hostname:   cfg.GetHostname(),
		UserData:   src.UserData,
		SSHKeys:    src.SSHKeys,
	}
	for _, sh := range shares {
		in.Mounts = append(in.Mounts, cloudinit.Mount{Tag: sh.Tag, Path: sh.ContainerPath, ReadOnly: sh.ReadOnly})
	}
	if in.InstanceID == "" {
		in.InstanceID = sb.ID
	}
	if in.Hostname == "" {
		in.Hostname = cfg.GetMetadata().GetName()
	}
	if n := sb.Net; n != nil && n.Ready && n.IP != "" {
		net := &cloudinit.Network{
			MAC: n.GuestMAC, IP: n.IP, PrefixLen: n.PrefixLen, Gateway: n.Gateway, MTU: n.MTU,
			DNS: cfg.GetDnsConfig().GetServers(), Search: cfg.GetDnsConfig().GetSearches(),
			Options: cfg.GetDnsConfig().GetOptions(),
		}
		for _, a := range n.AdditionalIPs {
			net.AdditionalIPs = append(net.AdditionalIPs, cloudinit.Address{IP: a.IP, PrefixLen: a.PrefixLen, Gateway: a.Gateway})
		}
		for _, r := range n.Routes {
			net.Routes = append(net.Routes, cloudinit.Route{Dst: r.Dst, GW: r.GW})
		}
		in.Network = net
	}
	return cloudinit.Build(in)
}
