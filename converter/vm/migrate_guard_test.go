package vm

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// TestMigrationXMLTakesTheHostFromTheTarget: what reaches the host (the
// emulator, qemu's own arguments, kernel and firmware paths, tuning) is
// the target pod's domain's, whatever the source's says.
func TestMigrationXMLTakesTheHostFromTheTarget(t *testing.T) {
	source := editDomain(t, migrationSourceXML, func(d *libvirtxml.Domain) {
		d.Devices.Emulator = "/bin/sh"
		d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{{Value: "-chardev"}}}
		d.OS.Kernel, d.OS.Initrd = "/etc/shadow", "/root/.ssh/id_ed25519"
		d.MemoryBacking = &libvirtxml.DomainMemoryBacking{MemorySource: &libvirtxml.DomainMemorySource{Type: "file"}}
		d.CPUTune = &libvirtxml.DomainCPUTune{EmulatorPin: &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: "0"}}
	})
	d, x := migrationDomain(t, source, migrationTargetXML)
	var want libvirtxml.Domain
	if err := want.Unmarshal(migrationTargetXML); err != nil {
		t.Fatal(err)
	}
	if d.Devices.Emulator != want.Devices.Emulator || d.QEMUCommandline != nil || d.MemoryBacking != nil || d.CPUTune != nil ||
		d.OS.Kernel != "" || d.OS.Initrd != "" {
		t.Fatalf("the source's host settings came through:\n%s", x)
	}
	for _, bad := range []string{"/bin/sh", "/etc/shadow", "id_ed25519", "-chardev"} {
		if strings.Contains(x, bad) {
			t.Fatalf("the migration domain holds the source's %q:\n%s", bad, x)
		}
	}
}
