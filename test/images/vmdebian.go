package main

import (
	"fmt"
	"os"

	"github.com/crimux/crimux/test/images/oci"
)

// debianImageSpec is crimux/vm-debian: the usable guest test/guest/build.sh
// makes (Debian 12, systemd, cloud-init, qemu-guest-agent, sshd, GRUB on
// its disk) as a containerDisk holding /disk/disk.qcow2 alone, like a
// stock cloud image: it boots from its disk, no kernel in the image. No
// disk given, no image. The layer is cached by the disk's path, which
// holds the key of its inputs, and its size and time.
func debianImageSpec(cached cachedLayerFunc, disk string) ([]oci.ImageSpec, error) {
	if disk == "" {
		return nil, nil
	}
	st, err := os.Stat(disk)
	if err != nil {
		return nil, fmt.Errorf("guest disk: %w", err)
	}
	key := fmt.Sprintf("%s %d %d", disk, st.Size(), st.ModTime().UnixNano())
	l, err := cached("COPY disk.qcow2 /disk/disk.qcow2 (Debian 12: cloud-init, qemu-guest-agent, openssh-server, GRUB)", key,
		func(l *oci.LayerBuilder) error {
			data, err := os.ReadFile(disk)
			l.File("disk/disk.qcow2", 0o644, data)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("guest disk layer: %w", err)
	}
	return []oci.ImageSpec{{ID: "crimux-vm-debian", Refs: []string{"crimux/vm-debian:latest"}, Layers: []oci.SpecLayer{l}, MultiPlatform: true}}, nil
}
