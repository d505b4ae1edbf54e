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
	var l vmLayers
	var release string
	var err error
	if l.kernel, release, err = vmKernelLayer(in, cache.specLayer); err != nil {
		return nil, err
	}
	if l.initrd, l.agentInitrd, err = vmInitrdLayers(tmp, in, release, cache.specLayer); err != nil {
		return nil, err
	}
	if l.disk, err = vmDiskLayer(tmp, cache.specLayer); err != nil {
		return nil, err
	}
	if l.hostile, err = buildHostileLayers(tmp); err != nil {
		return nil, err
	}
	debian, err := debianImageSpec(cache.specLayer, in.guestDisk)
	if err != nil {
		return nil, err
	}
	if err := cache.prune(); err != nil {
		return nil, err
	}
	return append(debian, vmSpecs(l)...), nil
}

// vmLayers are the layers the VM images are made of.
type vmLayers struct {
	kernel, initrd, agentInitrd, disk oci.SpecLayer
	hostile                           hostileLayers
}

// vmSpecs are the test VM's images, then the hostile ones.
func vmSpecs(l vmLayers) []oci.ImageSpec {
	args := map[string]string{"crimux.io/kernel-args": vmKernelArgs}
	h := l.hostile
	return []oci.ImageSpec{
		// The good test VM, served as a one-platform index (like KubeVirt's
		// containerdisks); the hostile ones as bare manifests.
		{ID: "crimux-vm-busybox", Refs: []string{"crimux/vm-busybox:latest"},
			Layers: []oci.SpecLayer{l.kernel, l.initrd, l.disk}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// The same files as an image of its own (its own digest and cache
		// entry): tenants of different images (e2e TestTwoTenants).
		{ID: "crimux-vm-busybox-b", Refs: []string{"crimux/vm-busybox-b:latest"},
			Layers: []oci.SpecLayer{l.kernel, l.initrd, l.disk}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// The same VM with Debian's qemu-guest-agent (vmagent.go).
		{ID: "crimux-vm-busybox-agent", Refs: []string{"crimux/vm-busybox-agent:latest"},
			Layers: []oci.SpecLayer{l.kernel, l.agentInitrd, l.disk}, Config: oci.ContainerConfig{Labels: args}, MultiPlatform: true},
		// A VM that never gets past its boot sector (the boot watch).
		{ID: "crimux-vm-stuck", Refs: []string{"crimux/vm-stuck:latest"}, Layers: []oci.SpecLayer{h.halting}},
		{ID: "crimux-vm-bad-empty", Refs: []string{"crimux/vm-bad-empty:latest"}, Layers: []oci.SpecLayer{h.empty}},
		{ID: "crimux-vm-bad-twodisks", Refs: []string{"crimux/vm-bad-twodisks:latest"}, Layers: []oci.SpecLayer{l.disk, h.secondDisk}},
		{ID: "crimux-vm-bad-symlink", Refs: []string{"crimux/vm-bad-symlink:latest"},
			Layers: []oci.SpecLayer{h.symlink, l.initrd}, Config: oci.ContainerConfig{Labels: args}},
		{ID: "crimux-vm-bad-backing", Refs: []string{"crimux/vm-bad-backing:latest"}, Layers: []oci.SpecLayer{h.backing}},
		{ID: "crimux-vm-bad-datafile", Refs: []string{"crimux/vm-bad-datafile:latest"}, Layers: []oci.SpecLayer{h.dataFile}},
		{ID: "crimux-vm-bad-bomb", Refs: []string{"crimux/vm-bad-bomb:latest"}, Layers: []oci.SpecLayer{h.bomb}},
	}
}

// vmKernelLayer is the test VM's kernel layer, and the kernel's release.
func vmKernelLayer(in vmInputs, cached cachedLayerFunc) (oci.SpecLayer, string, error) {
	release, err := vmKernelVersion(in.kernel)
	if err != nil {
		return oci.SpecLayer{}, "", err
	}
	kernelSum, err := fileSHA(in.kernel)
	if err != nil {
		return oci.SpecLayer{}, "", err
	}
	// The kernel uncompressed, booted through PVH (vmlinux.go), at the
	// path crimux's layout gives the kernel whatever its format; the
	// bzImage itself when it has no PVH entry.
	bzImage, err := os.ReadFile(in.kernel)
	if err != nil {
		return oci.SpecLayer{}, "", err
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
		return oci.SpecLayer{}, "", fmt.Errorf("kernel layer: %w", err)
	}
	return kernelL, release, nil
}

// vmInitrdLayers are the test VM's initramfs layer (static busybox, a
// DHCPv6 client, modules, /init) and the same with the guest agent.
func vmInitrdLayers(tmp string, in vmInputs, release string, cached cachedLayerFunc) (initrdL, agentL oci.SpecLayer, err error) {
	bb, err := extractFromDeb(in.busyboxStaticDeb, "./bin/busybox")
	if err != nil {
		return initrdL, agentL, err
	}
	mods, err := kernelModules(in.modules, vmModules)
	if err != nil {
		return initrdL, agentL, err
	}
	dhcp6c, err := goBuild(tmp, "dhcp6c")
	if err != nil {
		return initrdL, agentL, err
	}
	keyParts := [][]byte{bb, dhcp6c, []byte(vmInit), []byte(vmAcpidConf), []byte(vmPowerOff), []byte(vmUdhcpcScript), []byte(vmIndexHTML)}
	for _, m := range mods {
		keyParts = append(keyParts, []byte(m.name), m.data)
	}
	initrdKey := hashOf(keyParts...)
	initrdL, err = cached("COPY initrd.img /boot/initrd.img (busybox-static, virtio/button/evdev modules of "+release+", /init)",
		initrdKey, func(l *oci.LayerBuilder) error {
			data, err := initramfs(tmp, bb, dhcp6c, mods)
			l.File("boot/initrd.img", 0o644, data)
			return err
		})
	if err != nil {
		return initrdL, agentL, fmt.Errorf("initramfs layer: %w", err)
	}

	agentL, err = agentInitrdLayer(tmp, in, initrdKey, func() ([]byte, error) { return initramfs(tmp, bb, dhcp6c, mods) }, cached)
	if err != nil {
		return initrdL, agentL, err
	}
	return initrdL, agentL, nil
}

// vmDiskLayer is the test VM's disk layer, cached by the versions of the
// tools that make it, their configuration and the disk's parameters.
func vmDiskLayer(tmp string, cached cachedLayerFunc) (oci.SpecLayer, error) {
	var tools []string
	for _, t := range [][]string{{"mke2fs", "-V"}, {"qemu-img", "--version"}} {
		v, err := toolVersion(t[0], t[1:]...)
		if err != nil {
			return oci.SpecLayer{}, err
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
		return oci.SpecLayer{}, fmt.Errorf("disk layer: %w", err)
	}
	return diskL, nil
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
