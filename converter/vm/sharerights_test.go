package vm

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func securityContext(sc *runtimeapi.LinuxContainerSecurityContext) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: sc}}
}

func id(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

func caps(add, drop []string) *runtimeapi.Capability {
	return &runtimeapi.Capability{AddCapabilities: add, DropCapabilities: drop}
}

// TestShareRightsFrom: what virtiofsd may do for the guest is
// what the container's security context gives a container.
func TestShareRightsFrom(t *testing.T) {
	all := VirtiofsdCaps
	for _, tc := range []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want ShareRights
	}{
		{"no security context: as today", nil, ShareRights{}},
		{"root, default capabilities: as today", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(0)}, ShareRights{}},
		{"root by name", &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "root"}, ShareRights{}},
		{"privileged", &runtimeapi.LinuxContainerSecurityContext{Privileged: true, Capabilities: caps(nil, []string{"ALL"})}, ShareRights{}},
		{"non-root, every capability dropped",
			&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1000), Capabilities: caps(nil, []string{"ALL"})},
			ShareRights{User: &ShareUser{UID: 1000}, Squash: true, Drop: all}},
		{"non-root with its group and supplemental groups",
			&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1000), RunAsGroup: id(3000), SupplementalGroups: []int64{2000, 3000, 2000, 0}},
			ShareRights{User: &ShareUser{UID: 1000, GID: 3000, Groups: []uint32{2000, 0}}, Squash: true, Drop: all}},
		{"non-root holds only its ambient capabilities",
			&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1000), Capabilities: &runtimeapi.Capability{AddAmbientCapabilities: []string{"CAP_CHOWN"}}},
			ShareRights{User: &ShareUser{UID: 1000}, Squash: true, Drop: []string{"dac_override", "fowner", "fsetid", "setgid", "setuid", "mknod", "setfcap"}}},
		{"root in another group",
			&runtimeapi.LinuxContainerSecurityContext{RunAsGroup: id(5000)},
			ShareRights{User: &ShareUser{GID: 5000}, Squash: true}},
		{"root, every capability dropped: squashed to root, nothing kept",
			&runtimeapi.LinuxContainerSecurityContext{Capabilities: caps(nil, []string{"ALL"})},
			ShareRights{Squash: true, Drop: all}},
		{"root without MKNOD and FSETID",
			&runtimeapi.LinuxContainerSecurityContext{Capabilities: caps(nil, []string{"MKNOD", "cap_fsetid"})},
			ShareRights{Drop: []string{"fsetid", "mknod"}}},
		{"root, ALL dropped then CHOWN added (containerd's order)",
			&runtimeapi.LinuxContainerSecurityContext{Capabilities: caps([]string{"CHOWN"}, []string{"ALL"})},
			ShareRights{Squash: true, Drop: []string{"dac_override", "fowner", "fsetid", "setgid", "setuid", "mknod", "setfcap"}}},
		{"root, ALL added then SETUID dropped",
			&runtimeapi.LinuxContainerSecurityContext{Capabilities: caps([]string{"ALL"}, []string{"SETUID"})},
			ShareRights{Squash: true, Drop: []string{"setuid"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShareRightsFrom(securityContext(tc.sc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("rights:\n%+v (user %+v)\nwant\n%+v (user %+v)", got, got.User, tc.want, tc.want.User)
			}
		})
	}
}

// TestShareRightsFromRefuses: IDs a share cannot act as are
// InvalidArgument naming the field.
func TestShareRightsFromRefuses(t *testing.T) {
	for _, tc := range []struct {
		sc    *runtimeapi.LinuxContainerSecurityContext
		field string
	}{
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"}, "config.linux.security_context.run_as_username"},
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(-1)}, "config.linux.security_context.run_as_user"},
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1 << 32)}, "config.linux.security_context.run_as_user"},
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1), RunAsGroup: id(-5)}, "config.linux.security_context.run_as_group"},
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1), SupplementalGroups: []int64{4, -1}}, "config.linux.security_context.supplemental_groups[1]"},
		{&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1), SupplementalGroups: make([]int64, MaxShareGroups+1)}, "config.linux.security_context.supplemental_groups"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := ShareRightsFrom(securityContext(tc.sc))
			if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v; want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

// TestStorageFromCarriesRights: every share of a container carries its
// rights; a container without shares is not judged on them.
func TestStorageFromCarriesRights(t *testing.T) {
	cfg := securityContext(&runtimeapi.LinuxContainerSecurityContext{RunAsUser: id(1000), Capabilities: caps(nil, []string{"ALL"})})
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/h1"}, {ContainerPath: "/b", HostPath: "/h2", Readonly: true}}
	st, err := StorageFrom(cfg, files())
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.Shares {
		if sh.Rights.User == nil || sh.Rights.User.UID != 1000 || !sh.Rights.Squash {
			t.Fatalf("share %s: rights %+v", sh.ContainerPath, sh.Rights)
		}
	}
	noShares := securityContext(&runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"})
	if _, err := StorageFrom(noShares, files()); err != nil {
		t.Fatalf("a container without shares refused for its user name: %v", err)
	}
}
