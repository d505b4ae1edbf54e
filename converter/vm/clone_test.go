package vm

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func templateXML(t *testing.T) string {
	t.Helper()
	s := baseSpec()
	s.Name, s.Meta.ContainerID = "crimux-tmpl-abc", "tmpl-abc"
	s.Disk = &Disk{Path: "/var/lib/crimux/templates/abc/disk.qcow2", Format: "qcow2",
		Backing: &Disk{Path: "/var/lib/crimux/images/sha256-ab/disk.qcow2", Format: "qcow2"}}
	s.CIData = "/var/lib/crimux/templates/abc/cidata.iso"
	s.Identity = &Identity{UID: 1879048200, GID: 1879048200}
	x, err := DomainXML(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func cloneSpec() CloneSpec {
	return CloneSpec{Name: "crimux-c1", UUID: "11111111-2222-3333-4444-555555555555",
		Meta:     Metadata{Instance: "node-1", PodUID: "uid-1", PodName: "web", PodNamespace: "default", SandboxID: "s1", ContainerID: "c1"},
		Identity: &Identity{UID: 1879048193, GID: 1879048193},
		Disk:     "/var/lib/crimux/pods/s1/disk.qcow2", CIData: "/var/lib/crimux/vms/c1/cidata.iso",
		Console: Console{Socket: "/var/lib/crimux/vms/c1/console.sock", Log: "/var/lib/crimux/vms/c1/console.log"}}
}

// TestCloneXML: a clone is the template's domain with its own name, UUID,
// stamp, identity, root disk (the backing chain kept), cloud-init volume
// and console; nothing of the template's own files or identity is left.
func TestCloneXML(t *testing.T) {
	tmpl := templateXML(t)
	x, err := CloneXML(tmpl, cloneSpec())
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if d.Name != "crimux-c1" || d.UUID != "11111111-2222-3333-4444-555555555555" {
		t.Fatalf("name %s, uuid %s", d.Name, d.UUID)
	}
	if m, ok := ParseMetadata(&d); !ok || m.ContainerID != "c1" || m.SandboxID != "s1" {
		t.Fatalf("metadata %+v", m)
	}
	if len(d.SecLabel) != 1 || d.SecLabel[0].Label != "+1879048193:+1879048193" {
		t.Fatalf("seclabel %+v", d.SecLabel)
	}
	root := d.Devices.Disks[0]
	if root.Source.File.File != "/var/lib/crimux/pods/s1/disk.qcow2" || root.BackingStore == nil ||
		root.BackingStore.Source.File.File != "/var/lib/crimux/images/sha256-ab/disk.qcow2" {
		t.Fatalf("root disk %+v", root)
	}
	if cd := d.Devices.Disks[1]; cd.Source.File.File != "/var/lib/crimux/vms/c1/cidata.iso" {
		t.Fatalf("cidata %+v", cd.Source.File)
	}
	if s := d.Devices.Serials[0]; s.Source.UNIX.Path != "/var/lib/crimux/vms/c1/console.sock" || s.Log.File != "/var/lib/crimux/vms/c1/console.log" {
		t.Fatalf("console %+v %+v", s.Source.UNIX, s.Log)
	}
	for _, old := range []string{"templates/abc", "crimux-tmpl-abc", "1879048200"} {
		if strings.Contains(x, old) {
			t.Fatalf("the clone's XML still has the template's %q:\n%s", old, x)
		}
	}
	if d.Memory.Value != 256 || d.VCPU.Value != 2 || d.Devices.Emulator != "/usr/lib/crimux/qemu-wrapper" {
		t.Fatalf("the template's shape changed: memory %v, vcpus %v, emulator %s", d.Memory, d.VCPU, d.Devices.Emulator)
	}
}

// TestCloneXMLRefuses what a clone could not be honest about.
func TestCloneXMLRefuses(t *testing.T) {
	tmpl := templateXML(t)
	for name, edit := range map[string]func(*CloneSpec){
		"no name":             func(c *CloneSpec) { c.Name = "" },
		"no disk":             func(c *CloneSpec) { c.Disk = "" },
		"no cloud-init":       func(c *CloneSpec) { c.CIData = "" },
		"identity root":       func(c *CloneSpec) { c.Identity = &Identity{} },
		"no console log path": func(c *CloneSpec) { c.Console.Log = "" },
	} {
		c := cloneSpec()
		edit(&c)
		if _, err := CloneXML(tmpl, c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := CloneXML("<domain", cloneSpec()); err == nil {
		t.Error("a template XML that does not parse: no error")
	}
}
