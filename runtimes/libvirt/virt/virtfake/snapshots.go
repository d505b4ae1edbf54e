package virtfake

import (
	"fmt"
	"sort"

	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// CreateSnapshot records the domain's state; its XML gets the state and a
// creation time, as libvirt's does.
func (f *Libvirt) CreateSnapshot(h virt.Domain, doc string) (virt.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("CreateSnapshot"); err != nil {
		return virt.Snapshot{}, err
	}
	d, err := f.find(h)
	if err != nil {
		return virt.Snapshot{}, err
	}
	var s libvirtxml.DomainSnapshot
	if err := s.Unmarshal(doc); err != nil {
		return virt.Snapshot{}, fmt.Errorf("XML error: %w", err)
	}
	if _, dup := d.Snapshots[s.Name]; dup {
		return virt.Snapshot{}, invalid("snapshot %s exists", s.Name)
	}
	f.clock++
	s.State, s.CreationTime = d.State.String(), fmt.Sprint(f.clock)
	out, err := s.Marshal()
	if err != nil {
		return virt.Snapshot{}, err
	}
	d.Snapshots[s.Name] = &Snapshot{XML: out, State: d.State, Created: f.clock}
	d.Current = s.Name
	return virt.Snapshot{Name: s.Name, Domain: h}, nil
}

// RedefineSnapshot records a snapshot's metadata as libvirt's REDEFINE
// does: its state and creation time are the XML's; its parent must exist.
func (f *Libvirt) RedefineSnapshot(h virt.Domain, doc string, current bool) (virt.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("RedefineSnapshot"); err != nil {
		return virt.Snapshot{}, err
	}
	d, err := f.find(h)
	if err != nil {
		return virt.Snapshot{}, err
	}
	var s libvirtxml.DomainSnapshot
	if err := s.Unmarshal(doc); err != nil {
		return virt.Snapshot{}, fmt.Errorf("XML error: %w", err)
	}
	if s.Parent != nil && d.Snapshots[s.Parent.Name] == nil {
		return virt.Snapshot{}, invalid("parent %s of snapshot %s not found", s.Parent.Name, s.Name)
	}
	var created int64
	_, _ = fmt.Sscan(s.CreationTime, &created)
	state := virt.StateShutoff
	if s.State == virt.StateRunning.String() {
		state = virt.StateRunning
	} else if s.State == virt.StatePaused.String() {
		state = virt.StatePaused
	}
	d.Snapshots[s.Name] = &Snapshot{XML: doc, State: state, Created: created}
	if current {
		d.Current = s.Name
	}
	return virt.Snapshot{Name: s.Name, Domain: h}, nil
}

// snapshot finds a snapshot; the caller holds mu.
func (f *Libvirt) snapshot(s virt.Snapshot) (*Domain, *Snapshot, error) {
	d, err := f.find(s.Domain)
	if err != nil {
		return nil, nil, err
	}
	snap, ok := d.Snapshots[s.Name]
	if !ok {
		return nil, nil, fmt.Errorf("Domain snapshot not found: no domain snapshot with matching name '%s': %w: %w",
			s.Name, virt.ErrNoSnapshot, errdefs.ErrNotFound)
	}
	return d, snap, nil
}

func (f *Libvirt) LookupSnapshot(h virt.Domain, name string) (virt.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("LookupSnapshot"); err != nil {
		return virt.Snapshot{}, err
	}
	s := virt.Snapshot{Name: name, Domain: h}
	_, _, err := f.snapshot(s)
	return s, err
}

func (f *Libvirt) ListSnapshots(h virt.Domain) ([]virt.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("ListSnapshots"); err != nil {
		return nil, err
	}
	d, err := f.find(h)
	if err != nil {
		return nil, err
	}
	out := make([]virt.Snapshot, 0, len(d.Snapshots))
	for n := range d.Snapshots {
		out = append(out, virt.Snapshot{Name: n, Domain: h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *Libvirt) SnapshotXML(s virt.Snapshot) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("SnapshotXML"); err != nil {
		return "", err
	}
	_, snap, err := f.snapshot(s)
	if err != nil {
		return "", err
	}
	return snap.XML, nil
}

func (f *Libvirt) IsCurrentSnapshot(s virt.Snapshot) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("IsCurrentSnapshot"); err != nil {
		return false, err
	}
	d, _, err := f.snapshot(s)
	if err != nil {
		return false, err
	}
	return d.Current == s.Name, nil
}

// RevertToSnapshot returns the domain to the snapshot's state; a running
// qemu is replaced (stopped, with its event), as libvirt does.
func (f *Libvirt) RevertToSnapshot(s virt.Snapshot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("RevertToSnapshot"); err != nil {
		return err
	}
	d, snap, err := f.snapshot(s)
	if err != nil {
		return err
	}
	if d.State.Active() {
		f.emitStop(s.Domain.Name, virt.StopSaved)
	}
	d.State, d.Current = snap.State, s.Name
	return nil
}

func (f *Libvirt) DeleteSnapshot(s virt.Snapshot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("DeleteSnapshot"); err != nil {
		return err
	}
	d, _, err := f.snapshot(s)
	if err != nil {
		return err
	}
	delete(d.Snapshots, s.Name)
	if d.Current == s.Name {
		d.Current = ""
	}
	return nil
}
