package cri_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
)

// A pod or container asking for a uid or gid of the VM identities (or
// mapping one into its user namespace) is refused with the field named,
// and never reaches its runtime: as that uid it could signal, trace or
// open a VM's files.
func TestReservedIDsRefused(t *testing.T) {
	h := newHarness(t)
	h.seed()
	vmUID := int64(config.DefaultVMIDBase) + 5
	sc := func(edit func(*runtimeapi.LinuxContainerSecurityContext)) *runtimeapi.ContainerConfig {
		s := &runtimeapi.LinuxContainerSecurityContext{}
		edit(s)
		return &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: s}}
	}
	for name, tc := range map[string]struct {
		cfg   *runtimeapi.ContainerConfig
		field string
	}{
		"run_as_user": {sc(func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = &runtimeapi.Int64Value{Value: vmUID} }),
			"config.linux.security_context.run_as_user"},
		"run_as_group": {sc(func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsGroup = &runtimeapi.Int64Value{Value: vmUID} }),
			"config.linux.security_context.run_as_group"},
		"supplemental group": {sc(func(s *runtimeapi.LinuxContainerSecurityContext) { s.SupplementalGroups = []int64{100, vmUID} }),
			"config.linux.security_context.supplemental_groups[1]"},
		"userns mapping": {sc(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{
				Mode: runtimeapi.NamespaceMode_POD,
				Uids: []*runtimeapi.IDMapping{{HostId: config.DefaultVMIDBase - 10, ContainerId: 0, Length: 65536}}}}
		}), "config.linux.security_context.namespace_options.userns_options.uids[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			_, err := h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: tc.cfg})
			wantCode(t, err, codes.InvalidArgument, tc.field, "VM identities")
			if n := len(h.ctrd.Calls("CreateContainer")); n != 0 {
				t.Errorf("containerd got %d CreateContainer calls, want none", n)
			}
		})
	}

	t.Run("pod run_as_user", func(t *testing.T) {
		h.ctrd.ResetCalls()
		cfg := podConfig("web2", nil)
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: vmUID}}}
		_, err := h.rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		wantCode(t, err, codes.InvalidArgument, "config.linux.security_context.run_as_user")
		if n := len(h.ctrd.Calls("RunPodSandbox")); n != 0 {
			t.Errorf("containerd got %d RunPodSandbox calls, want none", n)
		}
	})

	t.Run("ids outside the range pass", func(t *testing.T) {
		h.ctrd.ResetCalls()
		cfg := sc(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
			s.SupplementalGroups = []int64{int64(config.DefaultVMIDBase) - 1, int64(config.DefaultVMIDBase) + config.DefaultVMIDCount}
		})
		_, err := h.rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: cfg})
		if err != nil {
			t.Fatalf("CreateContainer with ids outside the range: %v", err)
		}
		if n := len(h.ctrd.Calls("CreateContainer")); n != 1 {
			t.Errorf("containerd got %d CreateContainer calls, want 1", n)
		}
	})
}
