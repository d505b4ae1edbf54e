// Package cloudinit converts a VM pod's CRI config into cloud-init's
// NoCloud data: the files of the "cidata" volume crimux gives every VM.
//
//	meta-data       instance-id (the pod's UID: a restarted container is
//	                the same instance, a new pod a new one), local-hostname
//	user-data       the pod's user-data, with its SSH keys merged in
//	vendor-data     a bootcmd, run on every boot, present when it has
//	                work: mounting each virtio-fs share at its container
//	                path; writing the pod's resolv.conf when its DNS
//	                config has options (resolver.go)
//	network-config  version 2: the address, gateway, routes, MTU and DNS
//	                the pod's CNI result gives the guest (what crimux's DHCP
//	                responder hands out too), matched by the guest's MAC
//
// Where the user-data comes from: the annotation
// crimux.io/cloud-init-user-data, or, to keep secrets out of annotations,
// a file named user-data in a volume the pod mounts at /crimux/cloud-init
// (a Secret volume, say); the annotation crimux.io/ssh-authorized-keys
// adds SSH public keys, one per line, for the image's default user.
//
// Everything here is pure: input in, file contents (or the volume's
// bytes, WriteISO) out; the runtime puts the volume in the VM's directory
// (runtimes/libvirt/cidata). The user-data volume, the tenant's
// files, is read by the caller's ReadFile (internal/tenantfs's
// ReadBeneath, on descriptors); internal/archtest keeps syscalls out.
package cloudinit

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/crimux/crimux/internal/iso9660"
)

// Annotations and the mount path crimux reads cloud-init data from.
const (
	AnnotationUserData = "crimux.io/cloud-init-user-data"
	AnnotationSSHKeys  = "crimux.io/ssh-authorized-keys"
	// MountPath: a volume mounted here in the VM's container config may
	// hold a file "user-data"; the annotation wins if both are given.
	MountPath    = "/crimux/cloud-init"
	UserDataFile = "user-data"
)

// Limits: cloud-init data is small; anything larger is a mistake or an
// attack on the node.
const (
	MaxUserData = 64 << 10
	MaxSSHKeys  = 32
	maxKeysText = 32 << 10
)

// Input is what the NoCloud data is made of.
type Input struct {
	// InstanceID is stable for the pod (its UID).
	InstanceID string
	Hostname   string
	// UserData as the user gave it (checked with CheckUserData); nil: none.
	UserData []byte
	// SSHKeys are authorized keys (checked with ParseSSHKeys).
	SSHKeys []string
	// Network is the guest's addressing; nil writes no network-config
	// (the guest falls back to DHCP).
	Network *Network
	// Mounts are the VM's virtio-fs shares, which the guest mounts at
	// their container paths on every boot (vendor-data's bootcmd).
	Mounts []Mount
}

// Files are the NoCloud files, by name.
type Files map[string][]byte

// Build makes the NoCloud files.
func Build(in Input) (Files, error) {
	if in.InstanceID == "" {
		return nil, fmt.Errorf("cloud-init: an instance ID is required")
	}
	ud, err := mergeUserData(in.UserData, in.SSHKeys)
	if err != nil {
		return nil, err
	}
	cmds := append(mountCmds(in.Mounts), resolverCmds(in.Network)...)
	if ud, err = mergeBootcmd(ud, cmds); err != nil {
		return nil, err
	}
	f := Files{
		"meta-data": metaData(in.InstanceID, in.Hostname),
		"user-data": ud,
	}
	if len(cmds) > 0 {
		if f["vendor-data"], err = vendorData(cmds); err != nil {
			return nil, err
		}
	}
	if in.Network != nil {
		nc, err := networkConfig(*in.Network)
		if err != nil {
			return nil, err
		}
		f["network-config"] = nc
	}
	return f, nil
}

// metaData writes meta-data; both values are quoted YAML scalars.
func metaData(id, hostname string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "instance-id: %s\n", yamlQuote(id))
	if hostname != "" {
		fmt.Fprintf(&b, "local-hostname: %s\n", yamlQuote(hostname))
	}
	return []byte(b.String())
}

// yamlQuote writes s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// VolumeLabel is the label cloud-init's NoCloud looks for.
const VolumeLabel = "cidata"

// WriteISO writes the files as the NoCloud volume: an ISO 9660 image
// labelled cidata, with Joliet names (internal/iso9660).
func (f Files) WriteISO(w io.Writer, now time.Time) error {
	list := make([]iso9660.File, 0, len(f))
	for name, data := range f {
		list = append(list, iso9660.File{Name: name, Data: data})
	}
	return iso9660.Write(w, VolumeLabel, list, now)
}
