package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// A VM pod's volumes reach its guest two ways (docs/storage.md):
//
//   - a CRI Device with a host block device (a volumeDevices entry, a
//     block PVC) becomes a virtio-blk disk whose serial is derived from
//     the device's container path, so the guest finds it under
//     /dev/disk/by-id/virtio-<serial>;
//   - a CRI Mount of a host directory (emptyDir, ConfigMap, Secret,
//     projected, a filesystem PVC) becomes a virtio-fs share whose tag is
//     derived from the mount's container path.
//
// Neither is in the libvirt domain: qemu gets each as an open file (the
// block device crimux opened, the socket of the share's virtiofsd) with
// the arguments naming it, through the placement protocol, so qemu never
// opens a host path of a pod and no other VM's qemu can.

// Limits of a VM's storage.
const (
	// MaxVolumes bounds block devices plus shares: each takes a PCI slot
	// of the i440fx machine's one bus, which the VM's own devices share.
	MaxVolumes = 16
	// MaxTagLen is the longest virtio-fs tag the Linux driver accepts.
	MaxTagLen = 36
	// MaxSerialLen is the longest virtio-blk serial (the device ID field).
	MaxSerialLen = 20
)

// CloudInitMountPath is where a pod mounts its cloud-init user-data
// volume (converter/cloudinit); it is read on the host, not shared.
const CloudInitMountPath = "/crimux/cloud-init"

// kubeletFiles are the single-file mounts kubelet gives every container,
// which a guest has its own way to (DHCP, cloud-init) or no use for: they
// do not reach the guest.
var kubeletFiles = map[string]bool{
	"/etc/hosts": true, "/etc/hostname": true, "/etc/resolv.conf": true, "/dev/termination-log": true,
}

// serviceAccountDir is where kubelet mounts a pod's API token by default.
// Sharing it would give every VM a share (and so no hibernation); a guest
// that needs a token gets a projected volume mounted elsewhere.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// BlockDevice is a host block device given to the guest.
type BlockDevice struct {
	HostPath, ContainerPath string
	// Serial is what the guest sees as the disk's serial.
	Serial   string
	ReadOnly bool
	// Field names the CRI field it came from, for errors.
	Field string
}

// Share is a host directory shared with the guest through virtio-fs.
type Share struct {
	HostPath, ContainerPath string
	// Tag is what the guest mounts: mount -t virtiofs <tag> <dir>.
	Tag      string
	ReadOnly bool
	Field    string
	// Rights is what virtiofsd may do for the guest (sharerights.go).
	Rights ShareRights
}

// Storage is what of a container's devices and mounts reaches the guest.
type Storage struct {
	Devices []BlockDevice
	Shares  []Share
	// Skipped are the container paths of mounts left out on purpose
	// (kubelet's files, the service account token, cloud-init's).
	Skipped []string
}

// Empty reports whether nothing reaches the guest.
func (s Storage) Empty() bool { return len(s.Devices)+len(s.Shares) == 0 }

// StorageFrom picks a container's devices and mounts for the guest and
// checks what can be checked without the host: the host side (a block
// device, an existing directory) is the caller's to check. isFile reports
// whether a mount's host path is a regular file (kubelet's single-file
// mounts are left out; any other file mount is refused: virtio-fs shares
// directories).
func StorageFrom(cfg *runtimeapi.ContainerConfig, isFile func(hostPath string) bool) (Storage, error) {
	var st Storage
	for i, d := range cfg.GetDevices() {
		b, err := blockDevice(i, d)
		if err != nil {
			return Storage{}, err
		}
		st.Devices = append(st.Devices, b)
	}
	for i, m := range cfg.GetMounts() {
		sh, skip, err := share(i, m, isFile)
		if err != nil {
			return Storage{}, err
		}
		if skip {
			st.Skipped = append(st.Skipped, m.GetContainerPath())
			continue
		}
		st.Shares = append(st.Shares, sh)
	}
	if len(st.Shares) > 0 {
		rights, err := ShareRightsFrom(cfg)
		if err != nil {
			return Storage{}, err
		}
		for i := range st.Shares {
			st.Shares[i].Rights = rights
		}
	}
	return st, st.check()
}

func blockDevice(i int, d *runtimeapi.Device) (BlockDevice, error) {
	field := fmt.Sprintf("config.devices[%d]", i)
	if !path.IsAbs(d.GetHostPath()) {
		return BlockDevice{}, errdefs.Invalid(field+".host_path", "%q is not an absolute path", d.GetHostPath())
	}
	if !path.IsAbs(d.GetContainerPath()) {
		return BlockDevice{}, errdefs.Invalid(field+".container_path", "%q is not an absolute path", d.GetContainerPath())
	}
	perms := d.GetPermissions()
	if strings.Trim(perms, "rwm") != "" || !strings.Contains(perms, "r") && perms != "" {
		return BlockDevice{}, errdefs.Invalid(field+".permissions", "%q is not a set of r, w and m including r", perms)
	}
	return BlockDevice{HostPath: d.GetHostPath(), ContainerPath: d.GetContainerPath(),
		Serial: deriveName(d.GetContainerPath(), MaxSerialLen), ReadOnly: perms != "" && !strings.Contains(perms, "w"), Field: field}, nil
}

func share(i int, m *runtimeapi.Mount, isFile func(string) bool) (Share, bool, error) {
	field := fmt.Sprintf("config.mounts[%d]", i)
	cp := path.Clean(m.GetContainerPath())
	if !path.IsAbs(m.GetContainerPath()) {
		return Share{}, false, errdefs.Invalid(field+".container_path", "%q is not an absolute path", m.GetContainerPath())
	}
	if cp == CloudInitMountPath || cp == serviceAccountDir {
		return Share{}, true, nil
	}
	if !path.IsAbs(m.GetHostPath()) {
		return Share{}, false, errdefs.Invalid(field+".host_path", "%q is not an absolute path", m.GetHostPath())
	}
	if strings.Contains(m.GetHostPath(), ",") {
		// virtiofsd's -o source= ends at a comma.
		return Share{}, false, errdefs.Invalid(field+".host_path", "mount %s: %q holds a comma, which a VM share cannot name", cp, m.GetHostPath())
	}
	if m.GetPropagation() == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL {
		return Share{}, false, errdefs.Invalid(field+".propagation", "mount %s: a VM cannot propagate its mounts back to the host (PROPAGATION_BIDIRECTIONAL); use PROPAGATION_PRIVATE or PROPAGATION_HOST_TO_CONTAINER", cp)
	}
	if isFile(m.GetHostPath()) {
		if kubeletFiles[cp] {
			return Share{}, true, nil
		}
		return Share{}, false, errdefs.Invalid(field+".host_path", "mount %s: %s is a file; a VM is given directories (virtio-fs): mount the whole volume, without subPath", cp, m.GetHostPath())
	}
	if err := refuseIDMappings(field, cp, m); err != nil {
		return Share{}, false, err
	}
	return Share{HostPath: m.GetHostPath(), ContainerPath: cp, Tag: deriveName(cp, MaxTagLen),
		ReadOnly: m.GetReadonly(), Field: field}, false, nil
}

// refuseIDMappings refuses a mount with ID mappings (an idmapped mount of
// a user-namespaced pod): a share acts as the container's user
// (sharerights.go) and cannot also map IDs, and ignoring the mapping would
// let the guest act as host IDs the pod was not given.
func refuseIDMappings(field, containerPath string, m *runtimeapi.Mount) error {
	if len(m.GetUidMappings()) > 0 {
		return errdefs.Invalid(field+".uidMappings", "mount %s: a VM share cannot map user IDs (a user-namespaced pod, hostUsers: false); run the VM pod with host users", containerPath)
	}
	if len(m.GetGidMappings()) > 0 {
		return errdefs.Invalid(field+".gidMappings", "mount %s: a VM share cannot map group IDs (a user-namespaced pod, hostUsers: false); run the VM pod with host users", containerPath)
	}
	return nil
}

// check bounds the count and refuses two volumes the guest could not tell
// apart.
func (s Storage) check() error {
	if n := len(s.Devices) + len(s.Shares); n > MaxVolumes {
		return errdefs.Invalid("config.devices", "%d block devices and %d shared directories: a VM takes at most %d (one PCI slot each)", len(s.Devices), len(s.Shares), MaxVolumes)
	}
	seen := map[string]string{}
	for _, d := range s.Devices {
		if prev, ok := seen["blk:"+d.Serial]; ok {
			return errdefs.Invalid(d.Field+".container_path", "%s and %s both become serial %q", prev, d.ContainerPath, d.Serial)
		}
		seen["blk:"+d.Serial] = d.ContainerPath
	}
	for _, sh := range s.Shares {
		if prev, ok := seen["fs:"+sh.Tag]; ok {
			return errdefs.Invalid(sh.Field+".container_path", "%s and %s both become tag %q", prev, sh.ContainerPath, sh.Tag)
		}
		seen["fs:"+sh.Tag] = sh.ContainerPath
	}
	return nil
}

// deriveName turns a container path into a tag or serial of at most max
// bytes: the path without its leading slash, '/' and every byte outside
// [A-Za-z0-9._-] as '-'; a longer one keeps its head and ends with '-' and
// the first 8 hex digits of the path's SHA-256. /data → data,
// /var/lib/app → var-lib-app.
func deriveName(containerPath string, max int) string {
	p := strings.TrimPrefix(path.Clean(containerPath), "/")
	b := []byte(p)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '-'
		}
	}
	name := string(b)
	if name == "" {
		name = "root"
	}
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(containerPath))
	return name[:max-9] + "-" + hex.EncodeToString(sum[:4])
}

// Without is s less the device or share at containerPath (a VM's root
// volume, which the guest gets as its root disk instead).
func (s Storage) Without(containerPath string) Storage {
	if containerPath == "" {
		return s
	}
	out := Storage{Skipped: s.Skipped}
	for _, d := range s.Devices {
		if path.Clean(d.ContainerPath) != containerPath {
			out.Devices = append(out.Devices, d)
		}
	}
	for _, sh := range s.Shares {
		if sh.ContainerPath != containerPath {
			out.Shares = append(out.Shares, sh)
		}
	}
	return out
}
