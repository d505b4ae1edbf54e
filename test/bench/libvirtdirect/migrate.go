package libvirtdirect

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// What the bench's migrate phase needs of a direct VM besides virsh
// migrate itself: its files on another libvirtd that shares this host's
// filesystem (the test bed's node two), the domain it becomes there, and
// a command run in its guest through its agent.

// Destination is a direct VM's files on the other node: a directory of
// its own inside the VM's (removed with it) holding an overlay of the
// same base, which the migration's disk copy fills (virsh migrate
// --copy-storage-inc copies the top layer only), and a copy of its
// cloud-init volume (read-only: libvirt does not copy it).
type Destination struct {
	Dir, Disk, CIData string
}

// PrepareDestination makes v's files on the other node.
func (d *Client) PrepareDestination(v *VM) (Destination, error) {
	if d.layout.DiskPath == "" {
		return Destination{}, fmt.Errorf("%s: the image has no disk to migrate", v.Name)
	}
	dst := Destination{Dir: filepath.Join(v.dir, "dest")}
	dst.Disk = filepath.Join(dst.Dir, "disk.qcow2")
	if err := os.MkdirAll(dst.Dir, 0o700); err != nil {
		return dst, err
	}
	if err := os.Chown(dst.Dir, d.uid, d.gid); err != nil {
		return dst, err
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2",
		"-b", d.layout.DiskPath, "-F", d.layout.DiskFormat, dst.Disk).CombinedOutput()
	if err != nil {
		return dst, fmt.Errorf("destination overlay of %s: %v: %s", v.Name, err, out)
	}
	if err := os.Chown(dst.Disk, d.uid, d.gid); err != nil {
		return dst, err
	}
	if src := filepath.Join(v.dir, "cidata.iso"); fileExists(src) {
		dst.CIData = filepath.Join(dst.Dir, "cidata.iso")
		if err := copyFile(src, dst.CIData); err != nil {
			return dst, fmt.Errorf("destination cloud-init volume of %s: %w", v.Name, err)
		}
		if err := os.Chown(dst.CIData, d.uid, d.gid); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// DestinationXML is the domain v becomes on the other node, for virsh
// migrate --xml: its migratable definition with its root disk, cloud-init
// volume and console pointed at dst's files, as crimux's target gets
// files of its own (converter/vm MigrationXML), and its agent channel's
// socket and tap left to the other libvirtd to name.
func (d *Client) DestinationXML(v *VM, dst Destination) (string, error) {
	x, err := d.l.DomainGetXMLDesc(v.dom, golibvirt.DomainXMLMigratable)
	if err != nil {
		return "", fmt.Errorf("migratable XML of %s: %w", v.Name, err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return "", err
	}
	dom.ID = nil
	if dom.Devices == nil {
		return "", fmt.Errorf("%s has no devices", v.Name)
	}
	for i := range dom.Devices.Disks {
		disk := &dom.Devices.Disks[i]
		switch {
		case disk.Target != nil && disk.Target.Dev == "vda" && disk.Source != nil && disk.Source.File != nil:
			disk.Source.File.File, disk.BackingStore = dst.Disk, nil
		case disk.Device == "cdrom" && disk.Source != nil && disk.Source.File != nil && dst.CIData != "":
			disk.Source.File.File = dst.CIData
		default:
			return "", fmt.Errorf("%s has a disk the bench cannot place on the other node", v.Name)
		}
	}
	sock, log := filepath.Join(dst.Dir, "console.sock"), filepath.Join(dst.Dir, "console.log")
	for i := range dom.Devices.Serials {
		if s := &dom.Devices.Serials[i]; s.Source != nil && s.Source.UNIX != nil {
			s.Source.UNIX.Path = sock
			if s.Log != nil {
				s.Log.File = log
			}
		}
	}
	for i := range dom.Devices.Consoles {
		if c := &dom.Devices.Consoles[i]; c.Source != nil && c.Source.UNIX != nil {
			c.Source.UNIX.Path = sock
			if c.Log != nil {
				c.Log.File = log
			}
		}
	}
	for i := range dom.Devices.Channels {
		if ch := &dom.Devices.Channels[i]; ch.Source != nil && ch.Source.UNIX != nil {
			ch.Source.UNIX.Path = ""
		}
	}
	for i := range dom.Devices.Interfaces {
		if n := &dom.Devices.Interfaces[i]; n.Target != nil && strings.HasPrefix(n.Target.Dev, "vnet") {
			n.Target = nil
		}
	}
	return dom.Marshal()
}

// AgentExec starts sh -c script in the guest of domain name through its
// agent (guest-exec) and returns without waiting for it.
func (d *Client) AgentExec(name, script string) error {
	dom, err := d.l.DomainLookupByName(name)
	if err != nil {
		return err
	}
	cmd, err := json.Marshal(map[string]any{"execute": "guest-exec", "arguments": map[string]any{
		"path": "/bin/sh", "arg": []string{"-c", script}}})
	if err != nil {
		return err
	}
	_, err = d.l.QEMUDomainAgentCommand(dom, string(cmd), 10, 0)
	return err
}

// Emulator is the emulator of the VMs Start makes (QEMUBinary, or the
// placing script after PlaceIn).
func (d *Client) Emulator() string { return d.emulator }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
