package cloudinit

import (
	"bytes"

	"gopkg.in/yaml.v3"
)

// Mount is a virtio-fs share of the VM (converter/vm.Share) that the guest
// mounts at its container path.
type Mount struct {
	Tag, Path string
	ReadOnly  bool
}

// mountScript mounts $1 (a virtio-fs tag) at $2 with options $3, once:
// cloud-init runs bootcmd on every boot. Arguments, not text: a path is
// never parsed by the shell.
const mountScript = `mkdir -p "$2" && { mountpoint -q "$2" || mount -t virtiofs -o "$3" "$1" "$2"; }`

// bootcmd is the cloud-init bootcmd that mounts the shares.
func bootcmd(mounts []Mount) []any {
	var out []any
	for _, m := range mounts {
		opts := "rw"
		if m.ReadOnly {
			opts = "ro"
		}
		out = append(out, []any{"sh", "-c", mountScript, "crimux-mount", m.Tag, m.Path, opts})
	}
	return out
}

// vendorData is the cloud-config crimux gives as NoCloud vendor-data:
// the shares' mounts. cloud-init merges it under the user's user-data,
// whose own bootcmd would replace it; mergeBootcmd puts the mounts into
// a cloud-config user-data's bootcmd for that case.
func vendorData(mounts []Mount) ([]byte, error) {
	out, err := yaml.Marshal(map[string]any{"bootcmd": bootcmd(mounts)})
	if err != nil {
		return nil, err
	}
	return append([]byte(cloudConfigHeader+"\n"), out...), nil
}

// mergeBootcmd puts the mounts first in the bootcmd of a cloud-config
// user-data that has one (it would override vendor-data's); any other
// user-data is returned as it is.
func mergeBootcmd(ud []byte, mounts []Mount) ([]byte, error) {
	if len(mounts) == 0 || !bytes.HasPrefix(ud, []byte(cloudConfigHeader)) {
		return ud, nil
	}
	m, err := parseCloudConfig(ud)
	if err != nil {
		return nil, err
	}
	existing, ok := m["bootcmd"].([]any)
	if !ok {
		return ud, nil
	}
	m["bootcmd"] = append(bootcmd(mounts), existing...)
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte(cloudConfigHeader+"\n"), out...), nil
}
