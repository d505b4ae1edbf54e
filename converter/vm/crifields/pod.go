package crifields

// podFields are the pod's config (RunPodSandbox): what the VM pod is, its
// network and its cgroup. The security context is in security.go.
var podFields = Table{
	"runtime.v1.PodSandboxConfig.metadata":    nested,
	"runtime.v1.PodSandboxMetadata.name":      honoured("reported in the pod's status and lists, recorded in the domain's metadata; the guest's hostname when `hostname` is empty"),
	"runtime.v1.PodSandboxMetadata.uid":       mapped("cloud-init's instance-id: a restarted container is the same instance, a new pod a new one; recorded in the domain's metadata"),
	"runtime.v1.PodSandboxMetadata.namespace": honoured("reported in the pod's status and lists, recorded in the domain's metadata"),
	"runtime.v1.PodSandboxMetadata.attempt":   honoured("reported in the pod's status"),

	"runtime.v1.PodSandboxConfig.hostname":      mapped("the guest's hostname: cloud-init's local-hostname, and the host name of the pod's DHCP lease"),
	"runtime.v1.PodSandboxConfig.log_directory": honoured("the VM's CRI log (its serial console) is written under it"),

	"runtime.v1.PodSandboxConfig.dns_config": nested,
	"runtime.v1.DNSConfig.servers": mapped("the guest's name servers: in its DHCP lease (IPv4 ones), its DHCPv6 reply and router advertisement " +
		"(IPv6 ones) and in cloud-init's network-config (and in the resolv.conf written for `options`)"),
	"runtime.v1.DNSConfig.searches": mapped("the guest's search domains: in its DHCP lease, its DHCPv6 reply and router advertisement, " +
		"and in cloud-init's network-config (and in the resolv.conf written for `options`)"),
	"runtime.v1.DNSConfig.options": mapped("the `options` line of the guest's /etc/resolv.conf (kubelet's `ndots:5`), in a guest with cloud-init: " +
		"network-config has no field for them, so crimux's vendor-data writes the pod's resolv.conf (servers, searches, options, " +
		"as kubelet writes a container's) at every boot, in place of the file or link of the guest's resolver manager " +
		"(systemd-resolved's stub, resolvconf); without options the guest's manager keeps it. DHCP has no option for them either: " +
		"a guest without cloud-init, configured from its lease alone, gets the servers and search domains, not the options"),

	"runtime.v1.PodSandboxConfig.port_mappings": nested,
	"runtime.v1.PortMapping.protocol":           honoured("passed to CNI (the portMappings capability), which forwards the host port to the guest"),
	"runtime.v1.PortMapping.container_port":     honoured("passed to CNI (the portMappings capability): the guest's port on the pod IP"),
	"runtime.v1.PortMapping.host_port":          honoured("passed to CNI (the portMappings capability)"),
	"runtime.v1.PortMapping.host_ip":            honoured("passed to CNI (the portMappings capability)"),

	"runtime.v1.PodSandboxConfig.labels": honoured("kept, reported in the pod's status and lists, matched by their filters"),
	"runtime.v1.PodSandboxConfig.annotations": honoured("kept and reported; the `crimux.io/` ones configure the VM (docs/vm-pods.md, docs/storage.md), " +
		"the pod's under its container's; `kubernetes.io/ingress-bandwidth` and `kubernetes.io/egress-bandwidth` are passed to CNI " +
		"(the bandwidth capability), as containerd passes them (docs/networking.md)"),

	"runtime.v1.PodSandboxConfig.linux":                 nested,
	"runtime.v1.LinuxPodSandboxConfig.cgroup_parent":    honoured("qemu, and every virtiofsd of the VM, runs in a child of it with the container's limits; a VM pod must have one"),
	"runtime.v1.LinuxPodSandboxConfig.security_context": nested,
	"runtime.v1.LinuxPodSandboxConfig.sysctls": refused("a VM runs its own kernel, which crimux does not reach: the pod's sysctls would not be set anywhere. " +
		"Set them in the guest instead, with cloud-init user-data (a `bootcmd`, or `write_files` under /etc/sysctl.d)"),
	"runtime.v1.LinuxPodSandboxConfig.overhead": ignored("kubelet sizes the pod's cgroup with it; the VM is sized by its container's resources, " +
		"and qemu's own overhead is libvirt.memory_overhead_mib on the VM's cgroup"),
	"runtime.v1.LinuxPodSandboxConfig.resources": ignored("kubelet sizes the pod's cgroup with it; the VM is sized by its container's resources"),

	"runtime.v1.PodSandboxConfig.windows": ignored("Windows pods' config: kubelet sets it on Windows nodes only"),
}
