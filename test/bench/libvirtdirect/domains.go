package libvirtdirect

import (
	"errors"
	"fmt"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/converter/vm"
)

// DestroyDomain destroys (if running) and undefines a domain with its
// snapshot metadata; a missing domain is fine.
func DestroyDomain(l *golibvirt.Libvirt, name string) error {
	dom, err := l.DomainLookupByName(name)
	if golibvirt.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if state, _, err := l.DomainGetState(dom, 0); err == nil && golibvirt.DomainState(state) != golibvirt.DomainShutoff {
		if err := l.DomainDestroy(dom); err != nil && !golibvirt.IsNotFound(err) {
			return fmt.Errorf("destroy %s: %w", name, err)
		}
	}
	err = l.DomainUndefineFlags(dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineSnapshotsMetadata|golibvirt.DomainUndefineNvram)
	if err != nil && !golibvirt.IsNotFound(err) {
		return fmt.Errorf("undefine %s: %w", name, err)
	}
	return nil
}

// RemoveDomainsOf destroys and undefines every domain stamped with
// instance: the safety net for VMs crimux could not remove.
func RemoveDomainsOf(instance string) error {
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(Socket)))
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return err
	}
	defer l.Disconnect()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, "crimux-") {
			continue
		}
		x, err := l.DomainGetXMLDesc(d, 0)
		if err != nil {
			continue
		}
		var dom libvirtxml.Domain
		if dom.Unmarshal(x) != nil {
			continue
		}
		if m, ok := vm.ParseMetadata(&dom); ok && m.Instance == instance {
			errs = append(errs, DestroyDomain(l, d.Name))
		}
	}
	return errors.Join(errs...)
}

// snapshotXML asks for what crimux's VM API asks for of a running VM: an
// internal snapshot with the memory.
func snapshotXML(name string) (string, error) {
	s := libvirtxml.DomainSnapshot{Name: name, Memory: &libvirtxml.DomainSnapshotMemory{Snapshot: "internal"}}
	return s.Marshal()
}

// Snapshot takes an internal snapshot of a running direct VM.
func (d *Client) Snapshot(v *VM, name string) error {
	doc, err := snapshotXML(name)
	if err != nil {
		return err
	}
	_, err = d.l.DomainSnapshotCreateXML(v.dom, doc, uint32(golibvirt.DomainSnapshotCreateAtomic))
	return err
}

// Revert returns a direct VM to a snapshot.
func (d *Client) Revert(v *VM, name string) error {
	snap, err := d.l.DomainSnapshotLookupByName(v.dom, name, 0)
	if err != nil {
		return err
	}
	return d.l.DomainRevertToSnapshot(snap, 0)
}

// DeleteSnapshot deletes a snapshot of a direct VM.
func (d *Client) DeleteSnapshot(v *VM, name string) error {
	snap, err := d.l.DomainSnapshotLookupByName(v.dom, name, 0)
	if err != nil {
		return err
	}
	return d.l.DomainSnapshotDelete(snap, 0)
}
