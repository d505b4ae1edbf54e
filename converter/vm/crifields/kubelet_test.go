package crifields

import runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

// kubeletPod is what kubelet (kuberuntime's generatePodSandboxConfig)
// sends for an ordinary VM pod: a ClusterFirst pod under the Restricted
// Pod Security profile, with a RuntimeClass overhead.
func kubeletPod() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "u-1", Namespace: "default", Attempt: 1},
		Hostname: "web", LogDirectory: "/var/log/pods/default_web_u-1",
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"default.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 22, HostPort: 2222}},
		Labels:       map[string]string{"io.kubernetes.pod.name": "web"},
		Annotations:  map[string]string{"kubernetes.io/config.source": "api"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/burstable/podu-1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: kubeletNamespaces(),
				RunAsUser:        &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000},
				SupplementalGroups: []int64{2000},
				Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
				SelinuxOptions:     &runtimeapi.SELinuxOption{Level: "s0:c1,c2"},
			},
			Overhead:  &runtimeapi.LinuxContainerResources{CpuShares: 256, MemoryLimitInBytes: 256 << 20},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30},
		},
	}
}

// kubeletNamespaces are kubelet's for a pod without host namespaces nor
// a shared process namespace.
func kubeletNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
	}
}

// kubeletContainer is kubelet's generateContainerConfig for the pod's
// container, with its service variables, its volumes and kubelet's own
// files.
func kubeletContainer() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "vm", Attempt: 2},
		Image:    &runtimeapi.ImageSpec{Image: "sha256:abcd", UserSpecifiedImage: "registry.example/debian:12"},
		Envs: []*runtimeapi.KeyValue{{Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")},
			{Key: "KUBERNETES_SERVICE_PORT", Value: []byte("443")}},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/data", HostPath: "/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~empty-dir/data", SelinuxRelabel: true},
			{ContainerPath: "/config", HostPath: "/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~configmap/cfg", Readonly: true,
				RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
			{ContainerPath: "/var/run/secrets/kubernetes.io/serviceaccount", HostPath: "/var/lib/kubelet/pods/u-1/volumes/token", Readonly: true},
			{ContainerPath: "/etc/hosts", HostPath: "/var/lib/kubelet/pods/u-1/etc-hosts"},
			{ContainerPath: "/dev/termination-log", HostPath: "/var/lib/kubelet/pods/u-1/containers/vm/1234", SelinuxRelabel: true},
		},
		Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/xvdb", HostPath: "/dev/loop7", Permissions: "mrw"}},
		Labels:      map[string]string{"io.kubernetes.container.name": "vm"},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "2"},
		LogPath:     "vm/2.log",
		Stdin:       true, Tty: true,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{
				CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, OomScoreAdj: 999,
				CpusetCpus: "0-1", CpusetMems: "0",
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}, {PageSize: "1GB", Limit: 0}},
				Unified:        map[string]string{"memory.swap.max": "0"},
			},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Capabilities:     &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
				NamespaceOptions: kubeletNamespaces(),
				RunAsUser:        &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000},
				SupplementalGroups: []int64{2000}, NoNewPrivs: true,
				MaskedPaths:    []string{"/proc/asound", "/proc/acpi", "/proc/kcore"},
				ReadonlyPaths:  []string{"/proc/bus", "/proc/fs", "/proc/sys"},
				Seccomp:        &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
				Apparmor:       &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
				SelinuxOptions: &runtimeapi.SELinuxOption{Level: "s0:c1,c2"},
			},
		},
	}
}
