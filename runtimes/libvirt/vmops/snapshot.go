package vmops

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
	"github.com/crimux/crimux/vmtypes"
)

// Snapshots are libvirt internal snapshots: they live inside the VM's
// qcow2 overlay (disk, and memory when the VM runs or is paused), their
// metadata in libvirt. Both go with the VM: RemoveContainer undefines the
// domain with its snapshot metadata and deletes the overlay.

// CreateSnapshot snapshots the VM: its disk, and its memory when it runs
// or is paused; at most max_snapshots_per_vm of them (snapshot_cap.go).
// A VM whose overlay is in a state dir short of room (core.RequireRoom)
// is refused up front: ResourceExhausted, rather than a snapshot failing
// half-way through writing the VM's memory.
func (r *Ops) CreateSnapshot(ctx context.Context, id, name, description string) (vmtypes.SnapshotInfo, error) {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	op, err := r.beginSnapshottable(id)
	if err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	defer op.Done()
	c, l, dom := op.C, op.L, op.Dom
	if _, err := l.LookupSnapshot(dom, name); err == nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot_name %q: the VM already has a snapshot of that name: %w", name, errdefs.ErrAlreadyExists)
	} else if !virt.IsNoSnapshot(err) {
		return vmtypes.SnapshotInfo{}, err
	}
	if err := r.snapshotRoom(l, dom); err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	if c.RootVolume == nil { // the snapshot goes into the overlay, in the state dir
		if err := r.RequireRoom("snapshot " + strconv.Quote(name)); err != nil {
			return vmtypes.SnapshotInfo{}, err
		}
	}
	if op.View.State != virt.StateShutoff {
		if err := vmstorage.RequireNoShares(c, "a snapshot of a running VM"); err != nil {
			return vmtypes.SnapshotInfo{}, err
		}
	}
	doc, err := snapshotXML(name, description, op.View.State != virt.StateShutoff)
	if err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	if err := vmtypes.BeforeAct(ctx); err != nil {
		return vmtypes.SnapshotInfo{}, err
	}
	snap, err := l.CreateSnapshot(dom, doc)
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q of domain %s: %w", name, c.Domain, err)
	}
	r.Log.Info("VM snapshot created", "container", c.ID, "domain", c.Domain, "snapshot", name)
	return snapshotInfo(l, snap, name)
}

// ListSnapshots lists the VM's snapshots, oldest first.
func (r *Ops) ListSnapshots(ctx context.Context, id string) ([]vmtypes.SnapshotInfo, error) {
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, dom, err := r.DomainOf(c)
	if err != nil {
		return nil, err
	}
	return listSnapshots(l, dom)
}

// RestoreSnapshot reverts the VM to a snapshot: disk and, for a snapshot of
// a running or paused VM, memory. The VM ends in the snapshot's state.
func (r *Ops) RestoreSnapshot(ctx context.Context, id, name string) (vmtypes.PowerState, error) {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return "", err
	}
	op, err := r.beginSnapshottable(id)
	if err != nil {
		return "", err
	}
	defer op.Done()
	c, l, dom := op.C, op.L, op.Dom
	snap, err := lookupSnapshot(l, dom, name)
	if err != nil {
		return "", err
	}
	info, err := snapshotInfo(l, snap, name)
	if err != nil {
		return "", err
	}
	if err := vmtypes.BeforeAct(ctx); err != nil {
		return "", err
	}
	prev, target := core.PowerStateOf(op.View), snapshotPowerState(info.VMState)
	// A revert may stop qemu (to a shut-off snapshot, or to start a new
	// one): recorded first, that stop is no exit.
	if target.GuestOff() {
		c.PowerState = target
		if err := r.Store.PutContainer(c); err != nil {
			return "", err
		}
	}
	err = r.StartingQemu(c, func() error { return l.RevertToSnapshot(snap) })
	r.settlePower(l, dom, c, prev)
	if err != nil {
		return c.Power(), fmt.Errorf("restore snapshot %q of domain %s: %w", name, c.Domain, err)
	}
	r.Log.Info("VM snapshot restored", "container", c.ID, "domain", c.Domain, "snapshot", name, "power_state", c.PowerState)
	return c.Power(), nil
}

// DeleteSnapshot deletes one snapshot of the VM.
func (r *Ops) DeleteSnapshot(ctx context.Context, id, name string) error {
	if err := vmtypes.ValidateSnapshotName(name); err != nil {
		return err
	}
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return err
	}
	defer unlock()
	l, dom, err := r.DomainOf(c)
	if err != nil {
		return err
	}
	snap, err := lookupSnapshot(l, dom, name)
	if err != nil {
		return err
	}
	if err := vmtypes.BeforeAct(ctx); err != nil {
		return err
	}
	if err := l.DeleteSnapshot(snap); err != nil {
		return fmt.Errorf("delete snapshot %q of domain %s: %w", name, c.Domain, err)
	}
	r.Log.Info("VM snapshot deleted", "container", c.ID, "domain", c.Domain, "snapshot", name)
	return nil
}

// beginSnapshottable begins an operation on a running VM whose domain
// can be snapshotted or reverted: it has a disk and no hibernated memory
// (libvirt would have to discard it).
func (r *Ops) beginSnapshottable(id string) (*core.VMOp, error) {
	op, err := r.BeginVMOp(id)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(vmfiles.DiskPathOf(r.Store, op.C)); err != nil {
		op.Done()
		return nil, fmt.Errorf("the VM has no disk to snapshot: %w", errdefs.ErrFailedPrecondition)
	}
	if rv := op.C.RootVolume; rv != nil && rv.Format != "qcow2" {
		op.Done()
		return nil, fmt.Errorf("the VM's root disk %s is raw: snapshots live inside a qcow2 disk (crimux.io/root-disk-format: qcow2): %w",
			rv.ContainerPath, errdefs.ErrFailedPrecondition)
	}
	if op.View.ManagedSave {
		op.Done()
		return nil, fmt.Errorf("the VM is hibernated: power it Running first: %w", errdefs.ErrFailedPrecondition)
	}
	return op, nil
}

func lookupSnapshot(l virt.Libvirt, dom virt.Domain, name string) (virt.Snapshot, error) {
	snap, err := l.LookupSnapshot(dom, name)
	if virt.IsNoSnapshot(err) {
		return snap, fmt.Errorf("snapshot_name %q: the VM has no snapshot of that name: %w", name, errdefs.ErrNotFound)
	}
	return snap, err
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

func listSnapshots(l virt.Libvirt, dom virt.Domain) ([]vmtypes.SnapshotInfo, error) {
	snaps, err := l.ListSnapshots(dom)
	if err != nil {
		return nil, err
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

func snapshotInfo(l virt.Libvirt, snap virt.Snapshot, name string) (vmtypes.SnapshotInfo, error) {
	doc, err := l.SnapshotXML(snap)
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q: %w", name, err)
	}
	info, err := parseSnapshotXML(doc)
	if err != nil {
		return vmtypes.SnapshotInfo{}, fmt.Errorf("snapshot %q: %w", name, err)
	}
	if cur, err := l.IsCurrentSnapshot(snap); err == nil {
		info.Current = cur
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
