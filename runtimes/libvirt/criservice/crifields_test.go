package criservice

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// The fields the VM runtime refuses (converter/vm/crifields) are refused
// by the handlers themselves, naming the field, before anything is made.

func podSecurity(c *runtimeapi.PodSandboxConfig) *runtimeapi.LinuxSandboxSecurityContext {
	if c.Linux.SecurityContext == nil {
		c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
	}
	return c.Linux.SecurityContext
}

func ctrSecurity(c *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
	if c.Linux.SecurityContext == nil {
		c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	return c.Linux.SecurityContext
}

// TestRunPodSandboxRefusesCRIFields: no pod record, no pod network.
func TestRunPodSandboxRefusesCRIFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, field string
		edit        func(*runtimeapi.PodSandboxConfig)
	}{
		{"sysctls", "config.linux.sysctls", func(c *runtimeapi.PodSandboxConfig) {
			c.Linux.Sysctls = map[string]string{"net.core.somaxconn": "1024"}
		}},
		{"privileged", "config.linux.security_context.privileged", func(c *runtimeapi.PodSandboxConfig) { podSecurity(c).Privileged = true }},
		{"host PID", "config.linux.security_context.namespace_options.pid: NODE", func(c *runtimeapi.PodSandboxConfig) {
			podSecurity(c).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
		}},
		{"host IPC", "config.linux.security_context.namespace_options.ipc: NODE", func(c *runtimeapi.PodSandboxConfig) {
			podSecurity(c).NamespaceOptions = &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			cfg := podConfig(t, "web")
			tc.edit(cfg)
			_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
			wantCode(t, "RunPodSandbox", err, codes.InvalidArgument, tc.field)
			if recs, _ := e.R.Store.Sandboxes(); len(recs) != 0 || len(e.Net.Setups) != 0 {
				t.Fatalf("left behind: records %d, CNI ADDs %v", len(recs), e.Net.Setups)
			}
		})
	}
}

// TestCreateContainerRefusesCRIFields: no record, no VM directory, no
// domain, not even the image read.
func TestCreateContainerRefusesCRIFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, field string
		edit        func(*runtimeapi.ContainerConfig)
	}{
		{"command", "config.command: refused for a VM pod: a VM boots its image",
			func(c *runtimeapi.ContainerConfig) { c.Command = []string{"/bin/sh"} }},
		{"args", "config.args", func(c *runtimeapi.ContainerConfig) { c.Args = []string{"-c", "true"} }},
		{"working dir", "config.working_dir", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/srv" }},
		{"privileged", "config.linux.security_context.privileged", func(c *runtimeapi.ContainerConfig) { ctrSecurity(c).Privileged = true }},
		{"read-only root", "config.linux.security_context.readonly_rootfs", func(c *runtimeapi.ContainerConfig) { ctrSecurity(c).ReadonlyRootfs = true }},
		{"host PID", "config.linux.security_context.namespace_options.pid: NODE", func(c *runtimeapi.ContainerConfig) {
			ctrSecurity(c).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
		}},
		{"CDI device", "config.CDI_devices", func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "nvidia.com/gpu=0"}}
		}},
		{"stop signal", "config.stop_signal: SIGNAL_SIGINT", func(c *runtimeapi.ContainerConfig) { c.StopSignal = runtimeapi.Signal_SIGNAL_SIGINT }},
		{"image volume", "config.mounts[0].image", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/models", Image: &runtimeapi.ImageSpec{Image: "registry.example/models:1"}}}
		}},
		{"bind mount options", "config.mounts[0].mount_options", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/tmp", MountOptions: []string{"noexec"}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := newService(t)
			e.PutPod(t, "sb1", func(sb *store.Sandbox) { sb.Config.LogDirectory = t.TempDir() })
			cfg := vmConfig(256, 0, 0)
			tc.edit(cfg)
			_, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "sb1", Config: cfg})
			wantCode(t, "CreateContainer", err, codes.InvalidArgument, tc.field)
			recs, _ := e.R.Store.Containers()
			if len(recs) != 0 || len(vmDirs(t, e)) != 0 || len(e.Libvirt.Names()) != 0 || len(e.Images.Refs) != 0 {
				t.Fatalf("left behind: records %d, dirs %v, domains %v, images read %v", len(recs), vmDirs(t, e), e.Libvirt.Names(), e.Images.Refs)
			}
		})
	}
}

// TestKubeletDefaultsAreNotRefused: a container config with what kubelet
// sets on every container (service variables, kubelet's namespaces,
// masked paths, profiles, a QoS score, huge page limits of 0, stdin and
// a TTY) makes a VM, and its resources resize it.
func TestKubeletDefaultsAreNotRefused(t *testing.T) {
	s, e := newService(t)
	pod := podConfig(t, "web")
	pod.DnsConfig = &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Options: []string{"ndots:5"}}
	pod.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: kubeletNamespaces(),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	sb := runPod(t, s, pod)
	cfg := vmConfig(256, 100000, 100000)
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")}}
	cfg.Stdin, cfg.Tty = true, true
	res := cfg.Linux.Resources
	res.OomScoreAdj, res.CpuShares = 999, 1024
	res.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB"}}
	res.Unified = map[string]string{"memory.swap.max": "0"}
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: kubeletNamespaces(), NoNewPrivs: true,
		MaskedPaths: []string{"/proc/kcore"}, ReadonlyPaths: []string{"/proc/sys"},
		Seccomp:  &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	id := createVM(t, s, sb, pod, cfg)
	if len(e.Libvirt.Names()) != 1 {
		t.Fatalf("domains %v, want the VM's", e.Libvirt.Names())
	}
	if _, err := s.UpdateContainerResources(context.Background(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: res}); err != nil {
		t.Fatalf("UpdateContainerResources with kubelet's resources: %v", err)
	}
	if _, err := s.UpdatePodSandboxResources(context.Background(), &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: sb,
		Overhead: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}}); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
}

func kubeletNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER,
		Ipc: runtimeapi.NamespaceMode_POD, UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}
}
