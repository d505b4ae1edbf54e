package virt

import (
	golibvirt "github.com/digitalocean/go-libvirt"
)

// Snapshots over go-libvirt.

func (r remote) CreateSnapshot(d Domain, xml string) (Snapshot, error) {
	var s golibvirt.DomainSnapshot
	err := r.long(func(l *golibvirt.Libvirt) (err error) {
		s, err = l.DomainSnapshotCreateXML(dom(d), xml, uint32(golibvirt.DomainSnapshotCreateAtomic))
		return err
	})
	return Snapshot{Name: s.Name, Domain: d}, err
}

func (r remote) RedefineSnapshot(d Domain, xml string, current bool) (Snapshot, error) {
	flags := golibvirt.DomainSnapshotCreateRedefine
	if current {
		flags |= golibvirt.DomainSnapshotCreateCurrent
	}
	s, err := r.l.DomainSnapshotCreateXML(dom(d), xml, uint32(flags))
	return Snapshot{Name: s.Name, Domain: d}, classify(err)
}

func (r remote) LookupSnapshot(d Domain, name string) (Snapshot, error) {
	s, err := r.l.DomainSnapshotLookupByName(dom(d), name, 0)
	return Snapshot{Name: s.Name, Domain: d}, classify(err)
}

func (r remote) ListSnapshots(d Domain) ([]Snapshot, error) {
	ss, _, err := r.l.DomainListAllSnapshots(dom(d), 1, 0)
	if err != nil {
		return nil, classify(err)
	}
	out := make([]Snapshot, len(ss))
	for i, s := range ss {
		out[i] = Snapshot{Name: s.Name, Domain: d}
	}
	return out, nil
}

func (r remote) SnapshotXML(s Snapshot) (string, error) {
	x, err := r.l.DomainSnapshotGetXMLDesc(snap(s), 0)
	return x, classify(err)
}

func (r remote) IsCurrentSnapshot(s Snapshot) (bool, error) {
	cur, err := r.l.DomainSnapshotIsCurrent(snap(s), 0)
	return cur == 1, classify(err)
}

func (r remote) RevertToSnapshot(s Snapshot) error {
	return r.long(func(l *golibvirt.Libvirt) error { return l.DomainRevertToSnapshot(snap(s), 0) })
}

func (r remote) DeleteSnapshot(s Snapshot) error {
	return classify(r.l.DomainSnapshotDelete(snap(s), 0))
}
