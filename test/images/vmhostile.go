package main

import (
	"github.com/crimux/crimux/test/images/oci"
)

// hostileLayers are the layers of the VM images crimux must refuse before
// qemu sees them, and of the VM that never boots.
type hostileLayers struct {
	empty, secondDisk, symlink       oci.SpecLayer
	backing, dataFile, bomb, halting oci.SpecLayer
}

// buildHostileLayers builds the hostile images' layers: the ones of plain
// files first, then the crafted disks.
func buildHostileLayers(tmp string) (hostileLayers, error) {
	var h hostileLayers
	if err := h.buildFileLayers(); err != nil {
		return h, err
	}
	if err := h.buildDiskLayers(tmp); err != nil {
		return h, err
	}
	return h, nil
}

// buildFileLayers builds the layers of files that are no VM image, a
// second disk, and a kernel that is a symlink out of the image.
func (h *hostileLayers) buildFileLayers() error {
	var err error
	if h.empty, err = singleLayer("COPY README /README", func(l *oci.LayerBuilder) {
		l.File("README", 0o644, []byte("Not a VM image: neither /disk/ nor /boot/vmlinuz.\n"))
	}); err != nil {
		return err
	}
	if h.secondDisk, err = singleLayer("COPY second.raw /disk/second.raw", func(l *oci.LayerBuilder) {
		l.File("disk/second.raw", 0o644, make([]byte, 64<<10))
	}); err != nil {
		return err
	}
	if h.symlink, err = singleLayer("ln -s ../../../../../etc/shadow /boot/vmlinuz", func(l *oci.LayerBuilder) {
		l.Symlink("boot/vmlinuz", "../../../../../etc/shadow")
	}); err != nil {
		return err
	}
	return nil
}

// buildDiskLayers builds the layers of crafted qcow2 disks: one with a
// backing file, one with an external data file, a disk bomb, and one that
// halts in its boot sector.
func (h *hostileLayers) buildDiskLayers(tmp string) error {
	backing, err := emptyQcow2(tmp, "backing.qcow2", "-F", "raw", "-b", "/dev/sda", "-u")
	if err != nil {
		return err
	}
	if h.backing, err = diskLayer("qemu-img create -f qcow2 -F raw -b /dev/sda -u /disk/disk.qcow2 16M", backing); err != nil {
		return err
	}
	plain, err := emptyQcow2(tmp, "plain.qcow2")
	if err != nil {
		return err
	}
	dataFile, err := withExternalDataFile(plain, "/etc/passwd")
	if err != nil {
		return err
	}
	if h.dataFile, err = diskLayer("qcow2 16M with external data file /etc/passwd -> /disk/disk.qcow2", dataFile); err != nil {
		return err
	}
	// A few MiB of qcow2 declaring a 1 PiB disk: its overlay would grow
	// until the host's disk is full (the disk bomb).
	bomb, err := sizedQcow2(tmp, "bomb.qcow2", "1P", "-o", "cluster_size=2M")
	if err != nil {
		return err
	}
	if h.bomb, err = diskLayer("qemu-img create -f qcow2 -o cluster_size=2M /disk/disk.qcow2 1P", bomb); err != nil {
		return err
	}
	halting, err := haltingDisk(tmp)
	if err != nil {
		return err
	}
	if h.halting, err = diskLayer("COPY disk.qcow2 /disk/disk.qcow2 (1M, a boot sector that halts)", halting); err != nil {
		return err
	}
	return nil
}

// diskLayer is a layer holding data as /disk/disk.qcow2.
func diskLayer(createdBy string, data []byte) (oci.SpecLayer, error) {
	return singleLayer(createdBy, func(l *oci.LayerBuilder) {
		l.File("disk/disk.qcow2", 0o644, data)
	})
}
