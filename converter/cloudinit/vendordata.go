package cloudinit

import (
	"bytes"

	"gopkg.in/yaml.v3"
)

// vendorData is the cloud-config crimux gives as NoCloud vendor-data:
// its bootcmd (the shares' mounts, the pod's resolver). cloud-init merges
// it under the user's user-data, whose own bootcmd would replace it;
// mergeBootcmd puts crimux's commands into a cloud-config user-data's
// bootcmd for that case.
func vendorData(cmds []any) ([]byte, error) {
	out, err := yaml.Marshal(map[string]any{"bootcmd": cmds})
	if err != nil {
		return nil, err
	}
	return append([]byte(cloudConfigHeader+"\n"), out...), nil
}

// mergeBootcmd puts crimux's commands first in the bootcmd of a
// cloud-config user-data that has one (it would override vendor-data's);
// any other user-data is returned as it is.
func mergeBootcmd(ud []byte, cmds []any) ([]byte, error) {
	if len(cmds) == 0 || !bytes.HasPrefix(ud, []byte(cloudConfigHeader)) {
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
	m["bootcmd"] = append(append([]any{}, cmds...), existing...)
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append([]byte(cloudConfigHeader+"\n"), out...), nil
}
