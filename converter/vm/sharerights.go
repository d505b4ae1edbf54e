package vm

import (
	"fmt"
	"math"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// A share gives the guest what the container's security context gives a
// container's processes on the same volume, no more (docs/security.md,
// "pod spec ↔ host: storage"): virtiofsd acts for every guest user, so
// what it may do is what the container may do.
//
//   - A container that runs as a user other than root (run_as_user,
//     run_as_group) gets a virtiofsd in a user namespace whose root is
//     that user: whatever user of the guest asks, the share acts as that
//     host user and group (with the supplemental groups), and the kernel
//     refuses what that user cannot do (a device node, a setuid-root
//     file, a chown to another user).
//   - A root container keeps of virtiofsd's capabilities only those it
//     was given itself (capabilities, privileged), the way containerd
//     computes them; without CAP_SETUID or CAP_SETGID every guest user
//     acts as root, the one user such a container has.
//
// A container without a security context keeps every capability virtiofsd
// uses (containerd's defaults include them all): its share behaves as it
// always did, passing the guest's own uids and gids through.

// ShareRights is what virtiofsd may do for the guest on a share.
type ShareRights struct {
	// User is the host user every guest user acts as, in a user namespace
	// of its own; nil: virtiofsd is root and the guest's users pass
	// through (unless Squash).
	User *ShareUser
	// Squash makes every guest user act as virtiofsd's one user (User, or
	// root) instead of as itself.
	Squash bool
	// Drop lists the capabilities virtiofsd keeps by default that the
	// container was not given, as virtiofsd's modcaps names them.
	Drop []string
}

// MaxShareGroups bounds the supplemental groups a share acts with: the
// kernel takes at most 340 lines in a gid_map.
const MaxShareGroups = 64

// ShareUser is a host identity the guest acts as on a share.
type ShareUser struct {
	UID, GID uint32
	// Groups are the supplemental groups (supplemental_groups).
	Groups []uint32
}

// VirtiofsdCaps are the capabilities Debian 12's virtiofsd keeps (its
// setup_capabilities), as its modcaps option names them.
var VirtiofsdCaps = []string{"chown", "dac_override", "fowner", "fsetid", "setgid", "setuid", "mknod", "setfcap"}

// containerdDefaultCaps is the capability set containerd gives a
// container that asks for none (oci.populateDefaultUnixSpec).
var containerdDefaultCaps = []string{"chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw",
	"setgid", "setuid", "setfcap", "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write"}

const securityContextField = "config.linux.security_context"

// ShareRightsFrom reads a VM container's security context.
func ShareRightsFrom(cfg *runtimeapi.ContainerConfig) (ShareRights, error) {
	sc := cfg.GetLinux().GetSecurityContext()
	user, err := shareUser(sc)
	if err != nil {
		return ShareRights{}, err
	}
	caps := containerCaps(sc)
	if user != nil && user.UID != 0 {
		// A process that is not root holds no capability across exec but
		// its ambient ones.
		caps = intersect(caps, capNames(sc.GetCapabilities().GetAddAmbientCapabilities()))
	}
	r := ShareRights{User: user}
	for _, c := range VirtiofsdCaps {
		if !slices.Contains(caps, c) {
			r.Drop = append(r.Drop, c)
		}
	}
	r.Squash = user != nil || slices.Contains(r.Drop, "setuid") || slices.Contains(r.Drop, "setgid")
	return r, nil
}

// shareUser is the container's user, nil for root (uid and gid 0).
func shareUser(sc *runtimeapi.LinuxContainerSecurityContext) (*ShareUser, error) {
	// kubelet passes the image's user as a name when it is not a number;
	// root is the one name a VM image is sure to mean.
	if sc.GetRunAsUser() == nil && sc.GetRunAsUsername() != "" && sc.GetRunAsUsername() != "root" {
		return nil, errdefs.Invalid(securityContextField+".run_as_username",
			"%q: a VM's shares act as a numeric user, and a user name cannot be looked up in a VM image; set run_as_user", sc.GetRunAsUsername())
	}
	uid, err := hostID(securityContextField+".run_as_user", sc.GetRunAsUser())
	if err != nil {
		return nil, err
	}
	gid, err := hostID(securityContextField+".run_as_group", sc.GetRunAsGroup())
	if err != nil {
		return nil, err
	}
	if uid == 0 && gid == 0 {
		return nil, nil
	}
	u := &ShareUser{UID: uid, GID: gid}
	if n := len(sc.GetSupplementalGroups()); n > MaxShareGroups {
		return nil, errdefs.Invalid(securityContextField+".supplemental_groups", "%d groups: a VM's shares act as at most %d (each is a line of a user namespace's gid_map)", n, MaxShareGroups)
	}
	for i, g := range sc.GetSupplementalGroups() {
		id, err := hostID(fmt.Sprintf("%s.supplemental_groups[%d]", securityContextField, i), &runtimeapi.Int64Value{Value: g})
		if err != nil {
			return nil, err
		}
		if id != gid && !slices.Contains(u.Groups, id) {
			u.Groups = append(u.Groups, id)
		}
	}
	return u, nil
}

// hostID checks an ID: 0 when unset; (uid_t)-1 is no ID.
func hostID(field string, v *runtimeapi.Int64Value) (uint32, error) {
	if v == nil {
		return 0, nil
	}
	if v.GetValue() < 0 || v.GetValue() >= math.MaxUint32 {
		return 0, errdefs.Invalid(field, "%d is not a user or group ID", v.GetValue())
	}
	return uint32(v.GetValue()), nil
}

// containerCaps is the capability set containerd gives the container:
// its defaults, then "ALL" added, "ALL" dropped, each added, each dropped
// (containerd's order), or every capability when privileged. Names are
// lower case without "cap_".
func containerCaps(sc *runtimeapi.LinuxContainerSecurityContext) []string {
	if sc.GetPrivileged() {
		return slices.Clone(VirtiofsdCaps)
	}
	add := capNames(sc.GetCapabilities().GetAddCapabilities())
	drop := capNames(sc.GetCapabilities().GetDropCapabilities())
	caps := slices.Clone(containerdDefaultCaps)
	if slices.Contains(add, "all") {
		caps = append(caps, VirtiofsdCaps...)
	}
	if slices.Contains(drop, "all") {
		caps = nil
	}
	for _, c := range add {
		if c != "all" {
			caps = append(caps, c)
		}
	}
	return slices.DeleteFunc(caps, func(c string) bool { return slices.Contains(drop, c) })
}

// capNames normalises CRI capability names: "CAP_CHOWN", "CHOWN" and
// "chown" are all "chown".
func capNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(n)), "cap_")
	}
	return out
}

func intersect(a, b []string) []string {
	var out []string
	for _, c := range a {
		if slices.Contains(b, c) {
			out = append(out, c)
		}
	}
	return out
}
