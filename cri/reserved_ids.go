package cri

import (
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// IDRange is a range of uids and gids, [First, End).
type IDRange struct{ First, End uint32 }

func (r IDRange) holds(id int64) bool {
	return r.End > r.First && id >= int64(r.First) && id < int64(r.End)
}

// overlaps: [from, from+n) meets r.
func (r IDRange) overlaps(from, n uint32) bool {
	return r.End > r.First && n > 0 && uint64(from) < uint64(r.End) && uint64(from)+uint64(n) > uint64(r.First)
}

// ReserveIDs keeps a range of uids and gids for crimux alone (the VM
// identities, libvirt.vm_id_base and vm_id_count): each VM's qemu runs as
// one, so a container running as one of them, or mapping one into its
// user namespace, could signal, trace or open that VM's files. Pods and
// containers that ask for one are refused, InvalidArgument naming the
// field, whatever runtime serves them. Set once, before serving.
func (s *Server) ReserveIDs(r IDRange) { s.reserved = r }

// checkSandboxIDs checks a new pod's own ids.
func (s *Server) checkSandboxIDs(cfg *runtimeapi.PodSandboxConfig) error {
	sc := cfg.GetLinux().GetSecurityContext()
	if sc == nil {
		return nil
	}
	return s.checkIDs("config.linux.security_context", sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(),
		sc.GetNamespaceOptions().GetUsernsOptions())
}

// checkContainerIDs checks a new container's ids.
func (s *Server) checkContainerIDs(cfg *runtimeapi.ContainerConfig) error {
	sc := cfg.GetLinux().GetSecurityContext()
	if sc == nil {
		return nil
	}
	return s.checkIDs("config.linux.security_context", sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(),
		sc.GetNamespaceOptions().GetUsernsOptions())
}

func (s *Server) checkIDs(field string, user, group *runtimeapi.Int64Value, groups []int64, userns *runtimeapi.UserNamespace) error {
	r := s.reserved
	if user != nil && r.holds(user.GetValue()) {
		return s.reservedErr(field+".run_as_user", "uid", user.GetValue())
	}
	if group != nil && r.holds(group.GetValue()) {
		return s.reservedErr(field+".run_as_group", "gid", group.GetValue())
	}
	for i, g := range groups {
		if r.holds(g) {
			return s.reservedErr(field+".supplemental_groups["+strconv.Itoa(i)+"]", "gid", g)
		}
	}
	for i, m := range userns.GetUids() {
		if r.overlaps(m.GetHostId(), m.GetLength()) {
			return errdefs.Invalid(field+".namespace_options.userns_options.uids["+strconv.Itoa(i)+"]",
				"host ids %d to %d meet crimux's VM identities (%d to %d): map other ids", m.GetHostId(), uint64(m.GetHostId())+uint64(m.GetLength())-1, r.First, r.End-1)
		}
	}
	for i, m := range userns.GetGids() {
		if r.overlaps(m.GetHostId(), m.GetLength()) {
			return errdefs.Invalid(field+".namespace_options.userns_options.gids["+strconv.Itoa(i)+"]",
				"host ids %d to %d meet crimux's VM identities (%d to %d): map other ids", m.GetHostId(), uint64(m.GetHostId())+uint64(m.GetLength())-1, r.First, r.End-1)
		}
	}
	return nil
}

func (s *Server) reservedErr(field, kind string, id int64) error {
	return errdefs.Invalid(field, "%s %d is one of crimux's VM identities (%d to %d, libvirt.vm_id_base and vm_id_count): choose another",
		kind, id, s.reserved.First, s.reserved.End-1)
}
