package vm

import (
	"encoding/xml"
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// configurator fills one aspect of a domain from the spec (KubeVirt's
// converter pattern): small, pure, and tested through the golden XML.
type configurator func(Spec, *libvirtxml.Domain) error

// configurators run in order; each owns its part of the domain.
var configurators = []configurator{
	configureCompute,
	configureHugePages,
	configureHotplug,
	configureBoot,
	configureDisks,
	configureCIData,
	configureConsole,
	configureAgent,
	configureDevices,
	configureMetadata,
	configureIdentity,
}

// Domain builds the libvirt domain of spec.
func Domain(spec Spec) (*libvirtxml.Domain, error) {
	if spec.Name == "" {
		return nil, fmt.Errorf("vm spec: name is empty")
	}
	if spec.Disk == nil && spec.Boot == nil {
		return nil, fmt.Errorf("vm spec %s: neither a disk nor a kernel to boot", spec.Name)
	}
	d := &libvirtxml.Domain{Name: spec.Name, UUID: spec.UUID}
	if spec.GenID {
		d.GenID = &libvirtxml.DomainGenID{} // libvirt picks one, and a new one at every restore
	}
	for _, c := range configurators {
		if err := c(spec, d); err != nil {
			return nil, fmt.Errorf("vm spec %s: %w", spec.Name, err)
		}
	}
	return d, nil
}

// DomainXML is Domain marshalled.
func DomainXML(spec Spec) (string, error) {
	d, err := Domain(spec)
	if err != nil {
		return "", err
	}
	return d.Marshal()
}

// TCGCacheMiB bounds qemu's TCG translation cache (tb-cache).
const TCGCacheMiB = 128

// configureCompute sets the accelerator, vCPUs and memory. libvirt's
// domain type "qemu" is TCG: software emulation, for hosts whose KVM is
// absent or broken (nested guests).
func configureCompute(s Spec, d *libvirtxml.Domain) error {
	switch s.Accel {
	case AccelKVM:
		d.Type = "kvm"
		d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough"}
	case AccelTCG:
		d.Type = "qemu"
	default:
		return fmt.Errorf("accelerator %q is not kvm or tcg", s.Accel)
	}
	if s.VCPUs == 0 || s.MemoryMiB == 0 {
		return fmt.Errorf("vcpus %d and memory %d MiB must be positive", s.VCPUs, s.MemoryMiB)
	}
	d.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: s.VCPUs}
	d.Memory = &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"}
	if s.SharedMemory {
		d.MemoryBacking = &libvirtxml.DomainMemoryBacking{
			MemorySource: &libvirtxml.DomainMemorySource{Type: "memfd"},
			MemoryAccess: &libvirtxml.DomainMemoryAccess{Mode: "shared"},
		}
	}
	d.Features = &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}}
	if s.Accel == AccelTCG {
		// qemu's TCG translation cache defaults to 1 GiB, touched as the
		// guest runs new code: a Debian guest took qemu's RSS 1 GiB over
		// its RAM within a minute of an SSH login and the pod's cgroup
		// OOM-killed it. Bounded, it fits in memory_overhead_mib.
		d.Features.TCG = &libvirtxml.DomainFeatureTCG{TBCache: &libvirtxml.DomainFeatureTCGTBCache{Size: TCGCacheMiB, Unit: "MiB"}}
	}
	// A guest power-off or crash is the container exiting: the domain
	// stays defined so crimux can report the exit and kubelet decides.
	d.OnPoweroff, d.OnReboot, d.OnCrash = "destroy", "restart", "destroy"
	return nil
}

// configureBoot chooses between a direct kernel boot and the disk.
func configureBoot(s Spec, d *libvirtxml.Domain) error {
	d.OS = &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"}}
	if s.Boot == nil {
		d.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
		return nil
	}
	if s.Boot.Kernel == "" {
		return fmt.Errorf("kernel boot without a kernel")
	}
	d.OS.Kernel, d.OS.Initrd, d.OS.Cmdline = s.Boot.Kernel, s.Boot.Initrd, s.Boot.Args
	return nil
}

// configureDisks attaches the root disk (the overlay, or a root volume's
// disk) as the first virtio disk.
func configureDisks(s Spec, d *libvirtxml.Domain) error {
	if s.Disk == nil {
		return nil
	}
	if s.Disk.Format != "qcow2" && s.Disk.Format != "raw" {
		return fmt.Errorf("disk format %q is not qcow2 or raw", s.Disk.Format)
	}
	chain, err := backingChain(s.Disk.Backing, s.Identity == nil)
	if err != nil {
		return err
	}
	src := &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Disk.Path}}
	if s.Disk.Block {
		src = &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: s.Disk.Path}}
	}
	devices(d).Disks = append(devices(d).Disks, libvirtxml.DomainDisk{
		Device:       "disk",
		Driver:       &libvirtxml.DomainDiskDriver{Name: "qemu", Type: s.Disk.Format, Cache: "none", IO: "native"},
		Source:       src,
		BackingStore: chain,
		Target:       &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
	})
	return nil
}

// backingChain names the overlay's backing file, then ends the chain with
// an empty <backingStore/>: libvirt takes the chain from the domain
// instead of from the overlay's header, which qemu can rewrite, and qemu
// is given it explicitly. nil (no backing file) ends the chain at once.
// The image's disk, which many VMs read, is never relabelled: a domain of
// its own identity relabels nothing (and libvirt refuses a device label
// then); one of libvirt's shared user gets a label saying so (label).
func backingChain(b *Disk, label bool) (*libvirtxml.DomainDiskBackingStore, error) {
	end := &libvirtxml.DomainDiskBackingStore{}
	if b == nil {
		return end, nil
	}
	if b.Format != "qcow2" && b.Format != "raw" {
		return nil, fmt.Errorf("backing disk format %q is not qcow2 or raw", b.Format)
	}
	if b.Backing != nil {
		return nil, fmt.Errorf("backing disk %s has a backing file of its own: images' disks stand alone", b.Path)
	}
	src := &libvirtxml.DomainDiskSourceFile{File: b.Path}
	if label {
		src.SecLabel = []libvirtxml.DomainDeviceSecLabel{{Model: "dac", Relabel: "no"}}
	}
	return &libvirtxml.DomainDiskBackingStore{
		Format:       &libvirtxml.DomainDiskFormat{Type: b.Format},
		Source:       &libvirtxml.DomainDiskSource{File: src},
		BackingStore: end,
	}, nil
}

// configureIdentity runs qemu as the VM's own uid and gid: a static DAC
// label, relabelling off. libvirt then chowns none of the domain's files:
// crimux gave the VM its own (root disk, cloud-init ISO), and those VMs
// share (an image's disk, kernel and initrd) stay root's and read-only;
// libvirt still gives the identity the per-domain files it makes for qemu
// (its master key, its channel sockets' directory).
func configureIdentity(s Spec, d *libvirtxml.Domain) error {
	if s.Identity == nil {
		return nil
	}
	if s.Identity.UID == 0 || s.Identity.GID == 0 {
		return fmt.Errorf("VM identity %d:%d: qemu never runs as root", s.Identity.UID, s.Identity.GID)
	}
	d.SecLabel = append(d.SecLabel, libvirtxml.DomainSecLabel{
		Type: "static", Model: "dac", Relabel: "no",
		Label: fmt.Sprintf("+%d:+%d", s.Identity.UID, s.Identity.GID),
	})
	return nil
}

// configureCIData attaches the cloud-init volume as a read-only IDE
// CD-ROM (the i440fx machine has IDE built in; every cloud-init finds a
// CD-ROM labelled cidata). It takes no part in snapshots: it is made anew
// from the pod's spec.
func configureCIData(s Spec, d *libvirtxml.Domain) error {
	if s.CIData == "" {
		return nil
	}
	devices(d).Disks = append(devices(d).Disks, libvirtxml.DomainDisk{
		Device:   "cdrom",
		Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.CIData}},
		Target:   &libvirtxml.DomainDiskTarget{Dev: "hdc", Bus: "ide"},
		ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		Snapshot: "no",
	})
	return nil
}

// configureConsole puts the serial console on a unix socket qemu listens
// on (crimux attaches there) and logs every byte to a file that outlives
// crimux restarts (crimux copies it into the CRI log).
func configureConsole(s Spec, d *libvirtxml.Domain) error {
	if s.Console.Socket == "" || s.Console.Log == "" {
		return fmt.Errorf("console socket and log paths must be set")
	}
	port := uint(0)
	devices(d).Serials = append(devices(d).Serials, libvirtxml.DomainSerial{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: s.Console.Socket}},
		Target: &libvirtxml.DomainSerialTarget{Port: &port},
		Log:    &libvirtxml.DomainChardevLog{File: s.Console.Log, Append: "on"},
	})
	return nil
}

// AgentChannel is the virtio-serial channel of the QEMU guest agent
// (qemu-guest-agent listens on it in the guest; libvirt speaks to it).
const AgentChannel = "org.qemu.guest_agent.0"

// configureAgent gives every VM the guest agent's channel, so CRI exec
// (and exec probes) reach a guest that runs the agent. libvirt names the
// socket itself, in its own directory.
func configureAgent(_ Spec, d *libvirtxml.Domain) error {
	devices(d).Channels = append(devices(d).Channels, libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
		Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: AgentChannel}},
	})
	return nil
}

// BalloonStatsPeriod is how often, in seconds, the guest's virtio-balloon
// driver reports its memory (MemTotal, MemAvailable...): the container's
// memory figures (criservice's stats), as KubeVirt's every 10 s.
const BalloonStatsPeriod = 10

// configureDevices sets the emulator and leaves out what a server VM does
// not need: no graphics (none is asked for), and no USB controller, which
// libvirt would otherwise add to every i440fx domain (a PIIX3 UHCI: qemu
// code a hostile guest can reach, and a 1 kHz frame timer once a guest's
// driver starts it), as KubeVirt does. The balloon is there for the
// guest's account of its memory only: crimux never sets its target (the
// guest's RAM is resized through virtio-mem), and libvirt's start leaves
// it deflated.
func configureDevices(s Spec, d *libvirtxml.Domain) error {
	devices(d).Emulator = s.Emulator
	devices(d).Controllers = append(devices(d).Controllers, libvirtxml.DomainController{Type: "usb", Model: "none"})
	devices(d).MemBalloon = &libvirtxml.DomainMemBalloon{Model: "virtio", Stats: &libvirtxml.DomainMemBalloonStats{Period: BalloonStatsPeriod}}
	devices(d).RNGs = []libvirtxml.DomainRNG{{Model: "virtio", Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}}}}
	return nil
}

// configureMetadata stamps crimux's identity on the domain.
func configureMetadata(s Spec, d *libvirtxml.Domain) error {
	b, err := xml.Marshal(s.Meta)
	if err != nil {
		return err
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: string(b)}
	return nil
}

func devices(d *libvirtxml.Domain) *libvirtxml.DomainDeviceList {
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	return d.Devices
}

// ParseMetadata reads crimux's stamp back from a domain; ok is false for a
// domain crimux did not make.
func ParseMetadata(d *libvirtxml.Domain) (Metadata, bool) {
	var m Metadata
	if d.Metadata == nil || xml.Unmarshal([]byte(d.Metadata.XML), &m) != nil || m.ContainerID == "" {
		return Metadata{}, false
	}
	return m, true
}
