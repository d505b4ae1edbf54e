package main

// VM images (KubeVirt's containerDisk layout, see runtimes/libvirt/vmimage):
// crimux/vm-busybox, a direct-boot test VM (Debian's cloud kernel, a
// busybox initramfs, a small ext4 disk), and hostile images crimux must
// refuse before qemu sees them (crimux/vm-bad-*).
//
// The expensive layers (kernel, initramfs, disk) are cached by a hash of
// their inputs under -vm-cache, so a rebuild of the images after a change
// elsewhere stays fast and reuses the very same bytes.

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/crimux/crimux/test/images/oci"
)

// vmInputs are the host files the VM images are made of.
type vmInputs struct {
	kernel, modules, busyboxStaticDeb, qemuGADeb, cache string
	// guestDisk is the Debian guest's disk (test/guest/build.sh); ""
	// builds no crimux/vm-debian.
	guestDisk string
}

// vmImageSpecs builds the VM images' layers (through the cache) and
// returns their specs.
func vmImageSpecs(tmp string, in vmInputs) ([]oci.ImageSpec, error) {
	cache := &layerCache{dir: in.cache, used: map[string]bool{}}
	single := func(createdBy string, fill func(l *oci.LayerBuilder)) (oci.SpecLayer, error) {
		lb := oci.NewLayer()
		fill(lb)
		l, err := lb.Build()
		return oci.SpecLayer{Layer: l, CreatedBy: createdBy}, err
	}
	cached := func(createdBy, key string, fill func(l *oci.LayerBuilder) error) (oci.SpecLayer, error) {
		l, err := cache.get(createdBy+"\n"+key, func() (oci.Layer, error) {
			lb := oci.NewLayer()
			if err := fill(lb); err != nil {
				return oci.Layer{}, err
			}
			return lb.Build()
		})
		return oci.SpecLayer{Layer: l, CreatedBy: createdBy}, err
	}

	// Kernel.
	release, err := vmKernelVersion(in.kernel)
	if err != nil {
		return nil, err
	}
	kernelSum, err := fileSHA(in.kernel)
	if err != nil {
		return nil, err
	}
	// The kernel uncompressed, booted through PVH (vmlinux.go), at the
	// path crimux's layout gives the kernel whatever its format; the
	// bzImage itself when it has no PVH entry.
	bzImage, err := os.ReadFile(in.kernel)
	if err != nil {
		return nil, err
	}
	kernelData, kernelFrom := bzImage, "vmlinuz-"+release
	if vmlinux, err := pvhKernel(bzImage); err != nil {
		fmt.Fprintf(os.Stderr, "images: %s: booting the bzImage, not through PVH: %v\n", in.kernel, err)
	} else {
		kernelData, kernelFrom = vmlinux, "vmlinux-"+release+" (PVH, uncompressed from vmlinuz-"+release+")"
	}
	kernelL, err := cached("COPY "+kernelFrom+" /boot/vmlinuz", hex.EncodeToString(kernelSum), func(l *oci.LayerBuilder) error {
		l.File("boot/vmlinuz", 0o644, kernelData)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel layer: %w", err)
	}

	// Initramfs: static busybox, a DHCPv6 client, modules, /init.
	bb, err := extractFromDeb(in.busyboxStaticDeb, "./bin/busybox")
	if err != nil {
		return nil, err
	}
	mods, err := kernelModules(in.modules, vmModules)
	if err != nil {
		return nil, err
	}
	dhcp6c, err := goBuild(tmp, "dhcp6c")
	if err != nil {
		return nil, err
	}
	keyParts := [][]byte{bb, dhcp6c, []byte(vmInit), []byte(vmAcpidConf), []byte(vmPowerOff), []byte(vmUdhcpcScript), []byte(vmIndexHTML)}
	for _, m := range mods {
		keyParts = append(keyParts, []byte(m.name), m.data)
	}
	initrdKey := hashOf(keyParts...)
	initrdL, err := cached("COPY initrd.img /boot/initrd.img (busybox-static, virtio/button/evdev modules of "+release+", /init)",
		initrdKey, func(l *oci.LayerBuilder) error {
			data, err := initramfs(tmp, bb, dhcp6c, mods)
			l.File("boot/initrd.img", 0o644, data)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("initramfs layer: %w", err)
	}

	agentL, err := agentInitrdLayer(tmp, in, initrdKey, func() ([]byte, error) { return initramfs(tmp, bb, dhcp6c, mods) }, cached)
	if err != nil {
		return nil, err
	}

	// Disk.
	var tools []string
	for _, t := range [][]string{{"mke2fs", "-V"}, {"qemu-img", "--version"}} {
		v, err := toolVersion(t[0], t[1:]...)
		if err != nil {
			return nil, err
		}
		tools = append(tools, v)
	}
	conf, _ := os.ReadFile("/etc/mke2fs.conf")
	diskKey := hashOf([]byte(strings.Join(tools, "\n")), conf,
		[]byte(strings.Join([]string{vmDiskSize, vmDiskUUID, vmDiskHashSeed, vmDiskLabel, vmDiskMarker}, "\n")))
	diskL, err := cached("COPY disk.qcow2 /disk/disk.qcow2 (ext4 "+vmDiskSize+", /marker: disk-v1)", diskKey, func(l *oci.LayerBuilder) error {
		data, err := ext4Disk(tmp)
		l.File("disk/disk.qcow2", 0o644, data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("disk layer: %w", err)
	}

	// Hostile images.
	emptyL, err := single("COPY README /README", func(l *oci.LayerBuilder) {
		l.File("README", 0o644, []byte("Not a VM image: neither /disk/ nor /boot/vmlinuz.\n"))
	})
	if err != nil {
		return nil, err
	}
	secondDiskL, err := single("COPY second.raw /disk/second.raw", func(l *oci.LayerBuilder) {
		l.File("disk/second.raw", 0o644, make([]byte, 64<<10))
	})
	if err != nil {
		return nil, err
	}
	symlinkL, err := single("ln -s ../../../../../etc/shadow /boot/vmlinuz", func(l *oci.LayerBuilder) {
		l.Symlink("boot/vmlinuz", "../../../../../etc/shadow")
	})
	if err != nil {
		return nil, err
	}
	backing, err := emptyQcow2(tmp, "backing.qcow2", "-F", "raw", "-b", "/dev/sda", "-u")
	if err != nil {
		return nil, err
	}
	backingL, err := single("qemu-img create -f qcow2 -F raw -b /dev/sda -u /disk/disk.qcow2 16M", func(l *oci.LayerBuilder) {
		l.File("disk/disk.qcow2", 0o644, backing)
	})
	if err != nil {
		return nil, err
	}
	plain, err := emptyQcow2(tmp, "plain.qcow2")
	if err != nil {
		return nil, err
	}
	dataFile, err := withExternalDataFile(plain, "/etc/passwd")
	if err != nil {
		return nil, err
	}
	dataFileL, err := single("qcow2 16M with external data file /etc/passwd -> /disk/disk.qcow2", func(l *oci.LayerBuilder) {
		l.File("disk/disk.qcow2", 0o644, dataFile)
	})
	if err != nil {
		return nil, err
	}
	// A few MiB of qcow2 declaring a 1 PiB disk: its overlay would grow
	// until the host's disk is full (issue 13, the disk bomb).
	bomb, err := sizedQcow2(tmp, "bomb.qcow2", "1P", "-o", "cluster_size=2M")
	if err != nil {
		return nil, err
	}
	bombL, err := single("qemu-img create -f qcow2 -o cluster_size=2M /disk/disk.qcow2 1P", func(l *oci.LayerBuilder) {
		l.File("disk/disk.qcow2", 0o644, bomb)
	})
	if err != nil {
		return nil, err
	}
	halting, err := haltingDisk(tmp)
	if err != nil {
		return nil, err
	}
	haltingL, err := single("COPY disk.qcow2 /disk/disk.qcow2 (1M, a boot sector that halts)", func(l *oci.LayerBuilder) {
		l.File("disk/disk.qcow2", 0o644, halting)
	})
	if err != nil {
		return nil, err
	}
	debian, err := debianImageSpec(cached, in.guestDisk)
	if err != nil {
		return nil, err
	}
	if err := cache.prune(); err != nil {
		return nil, err
	}

	args := map[string]string{"crimux.io/kernel-args": vmKernelArgs}
	return append(debian, []oci.ImageSpec{
		// The good test VM, served as a one-platform index (like KubeVirt's
		// containerdisks); the hostile ones as bare manifests.
		{ID: "crimux-vm-busybox", Refs: []string{"crimux/vm-busybox:latest"},
			Layers: []oci.SpecLayer{kernelL, initrdL, diskL}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// The same files as an image of its own (its own digest and cache
		// entry): tenants of different images (e2e TestTwoTenants).
		{ID: "crimux-vm-busybox-b", Refs: []string{"crimux/vm-busybox-b:latest"},
			Layers: []oci.SpecLayer{kernelL, initrdL, diskL}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// The same VM with Debian's qemu-guest-agent (vmagent.go).
		{ID: "crimux-vm-busybox-agent", Refs: []string{"crimux/vm-busybox-agent:latest"},
			Layers: []oci.SpecLayer{kernelL, agentL, diskL}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// A VM that never gets past its boot sector (the boot watch).
		{ID: "crimux-vm-stuck", Refs: []string{"crimux/vm-stuck:latest"}, Layers: []oci.SpecLayer{haltingL}},
		{ID: "crimux-vm-bad-empty", Refs: []string{"crimux/vm-bad-empty:latest"}, Layers: []oci.SpecLayer{emptyL}},
		{ID: "crimux-vm-bad-twodisks", Refs: []string{"crimux/vm-bad-twodisks:latest"}, Layers: []oci.SpecLayer{diskL, secondDiskL}},
		{ID: "crimux-vm-bad-symlink", Refs: []string{"crimux/vm-bad-symlink:latest"},
			Layers: []oci.SpecLayer{symlinkL, initrdL}, Config: oci.ContainerConfig{Labels: args}},
		{ID: "crimux-vm-bad-backing", Refs: []string{"crimux/vm-bad-backing:latest"}, Layers: []oci.SpecLayer{backingL}},
		{ID: "crimux-vm-bad-datafile", Refs: []string{"crimux/vm-bad-datafile:latest"}, Layers: []oci.SpecLayer{dataFileL}},
		{ID: "crimux-vm-bad-bomb", Refs: []string{"crimux/vm-bad-bomb:latest"}, Layers: []oci.SpecLayer{bombL}},
	}...), nil
}

// vmDefaults fills in the VM inputs the flags left out.
func vmDefaults(busyboxDeb string, in vmInputs) (*vmInputs, error) {
	var err error
	if in.kernel == "" {
		if in.kernel, err = newestCloudKernel(); err != nil {
			return nil, err
		}
	}
	if in.modules == "" {
		release, err := vmKernelVersion(in.kernel)
		if err != nil {
			return nil, err
		}
		in.modules = "/lib/modules/" + release
	}
	if in.busyboxStaticDeb == "" {
		if in.busyboxStaticDeb, err = debNextTo(busyboxDeb, "busybox-static"); err != nil {
			return nil, err
		}
	}
	if in.qemuGADeb == "" {
		if in.qemuGADeb, err = debNextTo(busyboxDeb, "qemu-guest-agent"); err != nil {
			return nil, err
		}
	}
	switch in.cache {
	case "":
		in.cache = filepath.Join(filepath.Dir(busyboxDeb), "vm-layers")
	case "none":
		in.cache = ""
	}
	return &in, nil
}

// debNextTo is the newest PACKAGE_*.deb in the directory of busyboxDeb.
func debNextTo(busyboxDeb, pkg string) (string, error) {
	found, _ := filepath.Glob(filepath.Join(filepath.Dir(busyboxDeb), pkg+"_*.deb"))
	if len(found) == 0 {
		return "", fmt.Errorf("no %s_*.deb next to %s (apt-get download %s, or name it with its flag)", pkg, busyboxDeb, pkg)
	}
	sort.Slice(found, func(i, j int) bool { return versionLess(found[i], found[j]) })
	return found[len(found)-1], nil
}
