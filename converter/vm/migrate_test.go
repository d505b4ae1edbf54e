package vm

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
)

// migrationSourceXML is a running crimux VM's migratable XML as libvirt
// gives it: its domain ID, the full backing chain of its root disk, its
// cloud-init CD-ROM, its console as a serial port and a console on one
// socket, the agent channel's socket libvirt named, device aliases and
// addresses, and the DAC label of its own uid.
const migrationSourceXML = `<domain type='qemu' id='7'>
  <name>crimux-vm--src1</name>
  <uuid>0b6e3a4c-1d2e-4f50-8a9b-0c1d2e3f4a5b</uuid>
  <metadata>
    <crimux:crimux xmlns:crimux="https://crimux.io/xmlns/vm/1"><crimux:instance>node-1</crimux:instance><crimux:pod><crimux:uid>uid-src</crimux:uid><crimux:name>web</crimux:name><crimux:namespace>default</crimux:namespace></crimux:pod><crimux:sandbox-id>vm--srcpod</crimux:sandbox-id><crimux:container-id>vm--src1</crimux:container-id></crimux:crimux>
  </metadata>
  <memory unit='KiB'>262144</memory>
  <currentMemory unit='KiB'>262144</currentMemory>
  <vcpu placement='static'>2</vcpu>
  <os>
    <type arch='x86_64' machine='pc-i440fx-8.2'>hvm</type>
    <boot dev='hd'/>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/lib/crimux/qemu-wrapper</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' io='native'/>
      <source file='/var/lib/crimux/pods/srcpod/disk.qcow2' index='2'/>
      <backingStore type='file' index='1'>
        <format type='qcow2'/>
        <source file='/var/lib/crimux/images/sha256-ab/disk.qcow2'/>
        <backingStore/>
      </backingStore>
      <target dev='vda' bus='virtio'/>
      <alias name='virtio-disk0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x04' function='0x0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/crimux/vms/src1/cidata.iso' index='3'/>
      <backingStore/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
      <alias name='ide0-1-0'/>
      <address type='drive' controller='0' bus='1' target='0' unit='0'/>
    </disk>
    <controller type='usb' index='0' model='none'><alias name='usb'/></controller>
    <serial type='unix'>
      <source mode='bind' path='/var/lib/crimux/vms/src1/run/console.sock'/>
      <log file='/var/lib/crimux/vms/src1/console.log' append='on'/>
      <target type='isa-serial' port='0'><model name='isa-serial'/></target>
      <alias name='serial0'/>
    </serial>
    <console type='unix'>
      <source mode='bind' path='/var/lib/crimux/vms/src1/run/console.sock'/>
      <log file='/var/lib/crimux/vms/src1/console.log' append='on'/>
      <target type='serial' port='0'/>
      <alias name='serial0'/>
    </console>
    <channel type='unix'>
      <source mode='bind' path='/var/lib/libvirt/qemu/channel/target/domain-7-crimux-vm--src1/org.qemu.guest_agent.0'/>
      <target type='virtio' name='org.qemu.guest_agent.0' state='connected'/>
      <alias name='channel0'/>
      <address type='virtio-serial' controller='0' bus='0' port='1'/>
    </channel>
    <memballoon model='virtio'>
      <stats period='10'/>
      <alias name='balloon0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </memballoon>
  </devices>
  <seclabel type='static' model='dac' relabel='no'>
    <label>+500001:+500001</label>
    <imagelabel>+500001:+500001</imagelabel>
  </seclabel>
</domain>`

// migrationTargetXML is the domain crimux defined for the target pod, as
// the target's libvirt gives it back: its own name, UUID, stamp and uid,
// its own overlay over the image's base at another path, its own
// cloud-init volume and console files.
const migrationTargetXML = `<domain type='qemu'>
  <name>crimux-vm--tgt1</name>
  <uuid>9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d</uuid>
  <metadata>
    <crimux:crimux xmlns:crimux="https://crimux.io/xmlns/vm/1"><crimux:instance>node-2</crimux:instance><crimux:pod><crimux:uid>uid-tgt</crimux:uid><crimux:name>web-moved</crimux:name><crimux:namespace>default</crimux:namespace></crimux:pod><crimux:sandbox-id>vm--tgtpod</crimux:sandbox-id><crimux:container-id>vm--tgt1</crimux:container-id></crimux:crimux>
  </metadata>
  <memory unit='KiB'>262144</memory>
  <vcpu placement='static'>2</vcpu>
  <os><type arch='x86_64' machine='pc-i440fx-8.2'>hvm</type><boot dev='hd'/></os>
  <devices>
    <emulator>/usr/lib/crimux/qemu-wrapper</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' io='native'/>
      <source file='/var/lib/crimux/pods/tgtpod/disk.qcow2'/>
      <backingStore type='file'>
        <format type='qcow2'/>
        <source file='/srv/crimux/images/sha256-ab/disk.qcow2'/>
        <backingStore/>
      </backingStore>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/crimux/vms/tgt1/cidata.iso'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <serial type='unix'>
      <source mode='bind' path='/var/lib/crimux/vms/tgt1/run/console.sock'/>
      <log file='/var/lib/crimux/vms/tgt1/console.log' append='on'/>
      <target type='isa-serial' port='0'><model name='isa-serial'/></target>
    </serial>
    <console type='unix'>
      <source mode='bind' path='/var/lib/crimux/vms/tgt1/run/console.sock'/>
      <log file='/var/lib/crimux/vms/tgt1/console.log' append='on'/>
      <target type='serial' port='0'/>
    </console>
    <channel type='unix'>
      <source mode='bind'/>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
  </devices>
  <seclabel type='static' model='dac' relabel='no'>
    <label>+600002:+600002</label>
  </seclabel>
</domain>`

// editDomain returns x changed by edit, marshalled again.
func editDomain(t *testing.T, x string, edit func(*libvirtxml.Domain)) string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	edit(&d)
	out, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// migrationDomain is MigrationXML of source and target, parsed.
func migrationDomain(t *testing.T, source, target string) (*libvirtxml.Domain, string) {
	t.Helper()
	x, err := MigrationXML(source, target)
	if err != nil {
		t.Fatalf("MigrationXML: %v", err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatalf("MigrationXML gave XML that does not parse: %v\n%s", err, x)
	}
	return &d, x
}

// TestMigrationXMLKeepsTheSourceMachine: the domain keeps the source's
// name and UUID (libvirt checks them against the running domain, and
// renames it on arrival) and its devices' addresses, but not the ID of
// its run on the source.
func TestMigrationXMLKeepsTheSourceMachine(t *testing.T) {
	d, _ := migrationDomain(t, migrationSourceXML, migrationTargetXML)
	if d.Name != "crimux-vm--src1" || d.UUID != "0b6e3a4c-1d2e-4f50-8a9b-0c1d2e3f4a5b" {
		t.Errorf("name %s, UUID %s: want the source's", d.Name, d.UUID)
	}
	if d.ID != nil {
		t.Errorf("the source's domain ID %d was kept", *d.ID)
	}
	if d.OS.Type.Machine != "pc-i440fx-8.2" || d.Memory.Value != 262144 || d.VCPU.Value != 2 {
		t.Errorf("the machine changed: %s, memory %d, %d vCPUs", d.OS.Type.Machine, d.Memory.Value, d.VCPU.Value)
	}
	root := d.Devices.Disks[0]
	if root.Address == nil || root.Address.PCI == nil || *root.Address.PCI.Slot != 4 || root.Alias == nil || root.Alias.Name != "virtio-disk0" {
		t.Errorf("the root disk lost the source's address or alias: %+v %+v", root.Address, root.Alias)
	}
}

// TestMigrationXMLTakesTheTargetPodsOwn: what belongs to the target pod
// is the target's: crimux's stamp, the qemu identity, the root overlay
// (its backing chain left for the target's libvirt to read, the image's
// base being elsewhere there), the cloud-init volume, the console's
// socket and log (on the serial port and the console alike); the agent
// socket is left for libvirt to name. No path or uid of the source's is
// left.
func TestMigrationXMLTakesTheTargetPodsOwn(t *testing.T) {
	d, x := migrationDomain(t, migrationSourceXML, migrationTargetXML)
	if m, ok := ParseMetadata(d); !ok || m.ContainerID != "vm--tgt1" || m.SandboxID != "vm--tgtpod" || m.Instance != "node-2" {
		t.Errorf("metadata %+v (ok %v), want the target's", m, ok)
	}
	if len(d.SecLabel) != 1 || d.SecLabel[0].Model != "dac" || d.SecLabel[0].Label != "+600002:+600002" {
		t.Errorf("seclabel %+v, want the target's DAC label", d.SecLabel)
	}
	root, cd := d.Devices.Disks[0], d.Devices.Disks[1]
	if root.Source.File.File != "/var/lib/crimux/pods/tgtpod/disk.qcow2" {
		t.Errorf("root disk %s, want the target's overlay", root.Source.File.File)
	}
	if root.BackingStore != nil {
		t.Errorf("the root disk names a backing chain: %+v", root.BackingStore)
	}
	if cd.Target.Dev != "hdc" || cd.Source.File.File != "/var/lib/crimux/vms/tgt1/cidata.iso" {
		t.Errorf("cloud-init volume %s %s, want the target's", cd.Target.Dev, cd.Source.File.File)
	}
	const sock, log = "/var/lib/crimux/vms/tgt1/run/console.sock", "/var/lib/crimux/vms/tgt1/console.log"
	if len(d.Devices.Serials) != 1 || d.Devices.Serials[0].Source.UNIX.Path != sock || d.Devices.Serials[0].Log.File != log {
		t.Errorf("serial ports %+v, want one on %s logged to %s", d.Devices.Serials, sock, log)
	}
	if len(d.Devices.Consoles) != 1 || d.Devices.Consoles[0].Source.UNIX.Path != sock || d.Devices.Consoles[0].Log.File != log {
		t.Errorf("consoles %+v, want one on %s logged to %s", d.Devices.Consoles, sock, log)
	}
	if ch := d.Devices.Channels; len(ch) != 1 || ch[0].Source.UNIX.Path != "" || ch[0].Target.VirtIO.Name != AgentChannel {
		t.Errorf("agent channel %+v, want the source's with no socket path", ch)
	}
	for _, old := range []string{"/vms/src1/", "/pods/srcpod/", "sha256-ab", "500001", ">vm--src1<", "uid-src", "domain-7"} {
		if strings.Contains(x, old) {
			t.Errorf("the migration XML still has the source's %q:\n%s", old, x)
		}
	}
}

// TestMigrationXMLRefusesDisksThatCannotMove: a source disk the target
// pod lacks, or one that is neither the root disk nor the cloud-init
// CD-ROM (a volume), cannot arrive: the error names it.
func TestMigrationXMLRefusesDisksThatCannotMove(t *testing.T) {
	noCDROM := editDomain(t, migrationTargetXML, func(d *libvirtxml.Domain) { d.Devices.Disks = d.Devices.Disks[:1] })
	noRoot := editDomain(t, migrationTargetXML, func(d *libvirtxml.Domain) { d.Devices.Disks = d.Devices.Disks[1:] })
	volume := editDomain(t, migrationSourceXML, func(d *libvirtxml.Domain) {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{Device: "disk",
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/var/lib/kubelet/pods/p/volumes/data.img"}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vdb", Bus: "virtio"}})
	})
	blockRoot := editDomain(t, migrationSourceXML, func(d *libvirtxml.Domain) {
		d.Devices.Disks[0].Source = &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/vg0/root"}}
	})
	cases := []struct {
		name, source, target, names string
	}{
		{"the target has no cloud-init volume", migrationSourceXML, noCDROM, "hdc"},
		{"the target has no root disk", migrationSourceXML, noRoot, "vda"},
		{"the source has a volume", volume, migrationTargetXML, "vdb"},
		{"the root disk is a block device", blockRoot, migrationTargetXML, "vda"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, err := MigrationXML(c.source, c.target)
			if err == nil || !strings.Contains(err.Error(), c.names) {
				t.Fatalf("err %v, want one naming %s (XML %q)", err, c.names, x)
			}
		})
	}
}

// TestMigrationXMLRefusesWhatDoesNotParse: either domain not XML, or a
// source without a UUID, is an error that says which.
func TestMigrationXMLRefusesWhatDoesNotParse(t *testing.T) {
	noUUID := editDomain(t, migrationSourceXML, func(d *libvirtxml.Domain) { d.UUID = "" })
	cases := []struct {
		name, source, target, says string
	}{
		{"source not XML", "<domain", migrationTargetXML, "source"},
		{"target not XML", migrationSourceXML, "<domain><name>x", "target"},
		{"source without UUID", noUUID, migrationTargetXML, "UUID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := MigrationXML(c.source, c.target); err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err %v, want one naming the %s", err, c.says)
			}
		})
	}
}

// TestMigrationDisks: the root disk is copied when there is one; a VM
// booted from a kernel with only its cloud-init volume copies none.
func TestMigrationDisks(t *testing.T) {
	got, err := MigrationDisks(migrationSourceXML)
	if err != nil || len(got) != 1 || got[0] != "vda" {
		t.Errorf("with a root disk: %q, %v; want [vda]", got, err)
	}
	kernelBoot := editDomain(t, migrationSourceXML, func(d *libvirtxml.Domain) { d.Devices.Disks = d.Devices.Disks[1:] })
	if got, err := MigrationDisks(kernelBoot); err != nil || len(got) != 0 {
		t.Errorf("without a root disk: %q, %v; want none", got, err)
	}
	if _, err := MigrationDisks("<domain"); err == nil {
		t.Error("XML that does not parse: no error")
	}
}

// TestParseAnnotationsMigrateFrom: the source a target pod names is kept
// as written (the container's over the pod's); one that is empty, longer
// than a namespace/name, or holds a space or a control or non-ASCII
// character is refused, naming the annotation.
func TestParseAnnotationsMigrateFrom(t *testing.T) {
	longest := strings.Repeat("n", 253) + "/" + strings.Repeat("p", 253)
	for _, c := range []struct {
		name           string
		pod, container string
		want           string
	}{
		{"namespace/name", "default/web", "", "default/web"},
		{"container ID", "vm--0123abcd", "", "vm--0123abcd"},
		{"the longest", longest, "", longest},
		{"the container's wins", "default/a", "default/b", "default/b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, ctr := map[string]string{AnnotationMigrateFrom: c.pod}, map[string]string(nil)
			if c.container != "" {
				ctr = map[string]string{AnnotationMigrateFrom: c.container}
			}
			o, err := ParseAnnotations(pod, ctr)
			if err != nil || o.MigrateFrom != c.want {
				t.Fatalf("got %q, %v; want %q", o.MigrateFrom, err, c.want)
			}
		})
	}
	for name, v := range map[string]string{
		"empty":         "",
		"too long":      longest + "x",
		"a space":       "default/web app",
		"a newline":     "default/web\n",
		"a tab":         "default\t/web",
		"a DEL":         "default/web\x7f",
		"non-ASCII":     "default/wéb",
		"a NUL":         "default/\x00web",
		"leading space": " default/web",
	} {
		t.Run(name, func(t *testing.T) {
			o, err := ParseAnnotations(nil, map[string]string{AnnotationMigrateFrom: v})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "annotations[crimux.io/migrate-from]") {
				t.Fatalf("%q: err %v, want InvalidArgument naming annotations[crimux.io/migrate-from]", v, err)
			}
			if o.MigrateFrom != "" {
				t.Fatalf("%q refused but kept as %q", v, o.MigrateFrom)
			}
		})
	}
}

// onRootVolume makes x's root disk a root volume's (a durable VM): the
// attachment in the VM's directory dir, a block device or a file, with
// crimux's empty backing chain.
func onRootVolume(t *testing.T, x, dir string, block bool) string {
	return editDomain(t, x, func(d *libvirtxml.Domain) {
		p := dir + "/" + RootVolumeFile
		src := &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: p}}
		if block {
			src = &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: p}}
		}
		d.Devices.Disks[0].Source, d.Devices.Disks[0].BackingStore = src, &libvirtxml.DomainDiskBackingStore{}
	})
}

// TestMigrationXMLRootVolume: a durable VM's root disk, on a volume both
// nodes reach, arrives on the target pod's attachment of that volume
// (a block device or a file), with no backing chain for libvirt to read
// from its header, and is not copied.
func TestMigrationXMLRootVolume(t *testing.T) {
	for _, block := range []bool{true, false} {
		source := onRootVolume(t, migrationSourceXML, "/var/lib/crimux/vms/src1", block)
		target := onRootVolume(t, migrationTargetXML, "/var/lib/crimux/vms/tgt1", block)
		d, _ := migrationDomain(t, source, target)
		root := d.Devices.Disks[0]
		if got := diskPath(&root); got != "/var/lib/crimux/vms/tgt1/root-volume" || (root.Source.Block != nil) != block {
			t.Errorf("block %v: the root disk is %s (%+v), want the target's attachment", block, got, root.Source)
		}
		if bs := root.BackingStore; bs == nil || bs.Format != nil || (bs.Source != nil && (bs.Source.File != nil || bs.Source.Block != nil)) {
			t.Errorf("block %v: backing chain %+v, want crimux's empty one", block, root.BackingStore)
		}
		if disks, err := MigrationDisks(source); err != nil || len(disks) != 0 {
			t.Errorf("block %v: a root volume is copied: %q, %v", block, disks, err)
		}
	}
}

// TestMigrationXMLRootDiskKeepsItsKind: a root disk on a volume cannot
// arrive on an overlay (it would be copied into a disk that dies with
// the pod), nor an overlay on a volume (it would write over the volume).
func TestMigrationXMLRootDiskKeepsItsKind(t *testing.T) {
	volSource := onRootVolume(t, migrationSourceXML, "/var/lib/crimux/vms/src1", true)
	volTarget := onRootVolume(t, migrationTargetXML, "/var/lib/crimux/vms/tgt1", true)
	for name, pair := range map[string][2]string{
		"volume to overlay": {volSource, migrationTargetXML},
		"overlay to volume": {migrationSourceXML, volTarget},
	} {
		if x, err := MigrationXML(pair[0], pair[1]); err == nil || !strings.Contains(err.Error(), "volume") {
			t.Errorf("%s: err %v, want one saying the root disk is a volume on one side only (XML %q)", name, err, x)
		}
	}
}
