package libvirt

import (
	"context"
	"errors"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
)

// Snapshots are libvirt internal snapshots: they live inside the VM's
// qcow2 overlay (disk, and memory when the VM runs or is paused), their
// metadata in libvirt. Both go with the VM: RemoveContainer undefines the
// domain with its snapshot metadata and deletes the overlay.

// CreateSnapshot snapshots the VM: its disk, and its memory when it runs
// or is paused.
func (r *Runtime) CreateSnapshot(ctx context.Context, id, name, description string) (vmtypes.SnapshotInfo, error) {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	c, l, dom, v, unlock, err := r.lockSnapshottable(id)
	if err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	defer unlock()
	if _, err := l.DomainSnapshotLookupByName(dom, name, 0); err == nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot_name %q: the VM already has a snapshot of that name: %w", name, errdefs.ErrAlreadyExists)
	} else if !isNoSnapshot(err) {
		return vmtypes.SnapshotInfo{}, classify(err)
	}
	doc, err := snapshotXML(name, description, v.state != golibvirt.DomainShutoff)
	if err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	snap, err := l.DomainSnapshotCreateXML(dom, doc, uint32(golibvirt.DomainSnapshotCreateAtomic))
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q of domain %s: %w", name, c.Domain, classify(err))
	}
	r.log.Info("VM snapshot created", "container", c.ID, "domain", c.Domain, "snapshot", name)
	return snapshotInfo(l, snap, name)
}

// ListSnapshots lists the VM's snapshots, oldest first.
func (r *Runtime) ListSnapshots(ctx context.Context, id string) ([]vmtypes.SnapshotInfo, error) {
	c, unlock, err := r.lockVM(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, dom, err := r.domainOf(c)
	if err != nil {
		return nil, err
	}
	return listSnapshots(l, dom)
}

// RestoreSnapshot reverts the VM to a snapshot: disk and, for a snapshot of
// a running or paused VM, memory. The VM ends in the snapshot's state.
func (r *Runtime) RestoreSnapshot(ctx context.Context, id, name string) (vmtypes.PowerState, error) {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return "", err
	}
	c, l, dom, v, unlock, err := r.lockSnapshottable(id)
	if err != nil {
		return "", err
	}
	defer unlock()
	snap, err := lookupSnapshot(l, dom, name)
	if err != nil {
		return "", err
	}
	info, err := snapshotInfo(l, snap, name)
	if err != nil {
		return "", err
	}
	prev, target := powerStateOf(v), snapshotPowerState(info.VMState)
	// A revert may stop qemu (to a shut-off snapshot, or to start a new
	// one): recorded first, that stop is no exit.
	if target.GuestOff() {
		c.PowerState = target
		if err := r.store.putContainer(c); err != nil {
			return "", err
		}
	}
	err = l.DomainRevertToSnapshot(snap, 0)
	r.settlePower(l, dom, c, prev)
	if err != nil {
		return c.powerState(), fmt.Errorf("restore snapshot %q of domain %s: %w", name, c.Domain, classify(err))
	}
	r.log.Info("VM snapshot restored", "container", c.ID, "domain", c.Domain, "snapshot", name, "power_state", c.PowerState)
	return c.powerState(), nil
}

// DeleteSnapshot deletes one snapshot of the VM.
func (r *Runtime) DeleteSnapshot(ctx context.Context, id, name string) error {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return err
	}
	c, unlock, err := r.lockVM(id)
	if err != nil {
		return err
	}
	defer unlock()
	l, dom, err := r.domainOf(c)
	if err != nil {
		return err
	}
	snap, err := lookupSnapshot(l, dom, name)
	if err != nil {
		return err
	}
	if err := l.DomainSnapshotDelete(snap, 0); err != nil {
		return fmt.Errorf("delete snapshot %q of domain %s: %w", name, c.Domain, classify(err))
	}
	r.log.Info("VM snapshot deleted", "container", c.ID, "domain", c.Domain, "snapshot", name)
	return nil
}

// lockSnapshottable locks a running VM container whose domain can be
// snapshotted or reverted: it has a disk and no hibernated memory (libvirt
// would have to discard it).
func (r *Runtime) lockSnapshottable(id string) (*containerRecord, *golibvirt.Libvirt, golibvirt.Domain, domainView, func(), error) {
	fail := func(unlock func(), err error) (*containerRecord, *golibvirt.Libvirt, golibvirt.Domain, domainView, func(), error) {
		unlock()
		return nil, nil, golibvirt.Domain{}, domainView{}, nil, err
	}
	c, unlock, err := r.lockVM(id)
	if err != nil {
		return nil, nil, golibvirt.Domain{}, domainView{}, nil, err
	}
	if err := requireRunning(c); err != nil {
		return fail(unlock, err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "disk.qcow2")); err != nil {
		return fail(unlock, fmt.Errorf("the VM has no disk to snapshot: %w", errdefs.ErrFailedPrecondition))
	}
	l, dom, err := r.domainOf(c)
	if err != nil {
		return fail(unlock, err)
	}
	v, err := observe(l, dom)
	if err != nil {
		return fail(unlock, err)
	}
	if v.managedSave {
		return fail(unlock, fmt.Errorf("the VM is hibernated: power it Running first: %w", errdefs.ErrFailedPrecondition))
	}
	return c, l, dom, v, unlock, nil
}

func lookupSnapshot(l *golibvirt.Libvirt, dom golibvirt.Domain, name string) (golibvirt.DomainSnapshot, error) {
	snap, err := l.DomainSnapshotLookupByName(dom, name, 0)
	if isNoSnapshot(err) {
		return snap, fmt.Errorf("snapshot_name %q: the VM has no snapshot of that name: %w", name, errdefs.ErrNotFound)
	}
	return snap, classify(err)
}

func isNoSnapshot(err error) bool {
	var le golibvirt.Error
	return errors.As(err, &le) && le.Code == uint32(golibvirt.ErrNoDomainSnapshot)
}

// snapshotXML is the request for an internal snapshot: with the memory of
// an active domain, disk only (qemu-img) of a shut-off one.
func snapshotXML(name, description string, active bool) (string, error) {
	s := libvirtxml.DomainSnapshot{Name: name, Description: description}
	if active {
		s.Memory = &libvirtxml.DomainSnapshotMemory{Snapshot: "internal"}
	} else {
		s.Memory = &libvirtxml.DomainSnapshotMemory{Snapshot: "no"}
	}
	return s.Marshal()
}

func listSnapshots(l *golibvirt.Libvirt, dom golibvirt.Domain) ([]vmtypes.SnapshotInfo, error) {
	snaps, _, err := l.DomainListAllSnapshots(dom, 1, 0)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]vmtypes.SnapshotInfo, 0, len(snaps))
	for _, s := range snaps {
		info, err := snapshotInfo(l, s, s.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func snapshotInfo(l *golibvirt.Libvirt, snap golibvirt.DomainSnapshot, name string) (vmtypes.SnapshotInfo, error) {
	doc, err := l.DomainSnapshotGetXMLDesc(snap, 0)
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q: %w", name, classify(err))
	}
	info, err := parseSnapshotXML(doc)
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q: %w", name, err)
	}
	if cur, err := l.DomainSnapshotIsCurrent(snap, 0); err == nil {
		info.Current = cur == 1
	}
	return info, nil
}

func parseSnapshotXML(doc string) (vmtypes.SnapshotInfo, error) {
	var s libvirtxml.DomainSnapshot
	if err := s.Unmarshal(doc); err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("parse snapshot XML: %w", err)
	}
	created, _ := strconv.ParseInt(s.CreationTime, 10, 64)
	return vmtypes.SnapshotInfo{
		Name: s.Name, Description: s.Description, CreatedAt: created, VMState: s.State,
		Memory: s.Memory != nil && s.Memory.Snapshot == "internal",
	}, nil
}

// snapshotPowerState is the power state a restore of a snapshot taken in
// state leaves the VM in.
func snapshotPowerState(state string) vmtypes.PowerState {
	switch state {
	case "running", "blocked":
		return vmtypes.PowerRunning
	case "paused", "pmsuspended":
		return vmtypes.PowerPaused
	}
	return vmtypes.PowerShutdown
}
