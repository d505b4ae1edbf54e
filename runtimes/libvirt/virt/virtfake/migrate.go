package virtfake

import (
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// SetPeer makes peer the libvirtd every Migrate reaches, whatever its URI
// (nil: migrations fail, as to a libvirtd that does not answer).
func (f *Libvirt) SetPeer(peer *Libvirt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peer = peer
}

// Migrations lists the migrations asked of this libvirtd, in order.
func (f *Libvirt) Migrations() []virt.Migration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]virt.Migration(nil), f.migrations...)
}

// Migrate moves a running domain to the peer: there it is defined from
// the destination XML under the destination name, running, with the
// agent of the moved domain; here it is shut off with a StopMigrated
// event, still defined.
func (f *Libvirt) Migrate(h virt.Domain, m virt.Migration) error {
	f.mu.Lock()
	f.migrations = append(f.migrations, m)
	peer := f.peer
	f.mu.Unlock()
	var agent func(string) (string, error)
	err := f.power("Migrate", h, func(d *Domain) error {
		if d.State != virt.StateRunning && d.State != virt.StatePaused {
			return invalid("domain is not running")
		}
		if peer == nil {
			return invalid("unable to connect to server at '%s'", m.PeerURI)
		}
		agent = d.Agent
		return nil
	})
	if err != nil {
		return err
	}
	if err := peer.arrive(m, agent); err != nil {
		return err
	}
	return f.power("MigrateDone", h, func(d *Domain) error {
		d.State = virt.StateShutoff
		f.emitStop(h.Name, virt.StopMigrated)
		return nil
	})
}

// arrive defines and runs a migrated domain.
func (f *Libvirt) arrive(m virt.Migration, agent func(string) (string, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Arrive"); err != nil {
		return err
	}
	if d, ok := f.domains[m.DestName]; ok && d.State.Active() {
		return invalid("domain %s is already active", m.DestName)
	}
	f.clock++
	f.domains[m.DestName] = &Domain{XML: m.DestXML, State: virt.StateRunning, Snapshots: map[string]*Snapshot{},
		uuid: virt.UUID{byte(f.clock)}, Agent: agent}
	return nil
}

// MigrationProgress: the fake's migrations are over when Migrate returns.
func (f *Libvirt) MigrationProgress(h virt.Domain) (virt.MigrationProgress, bool, error) {
	return virt.MigrationProgress{}, false, f.call("MigrationProgress")
}

// CompletedMigration is a migration of no downtime.
func (f *Libvirt) CompletedMigration(h virt.Domain) (virt.MigrationProgress, bool, error) {
	return virt.MigrationProgress{}, true, f.call("CompletedMigration")
}

// AbortMigration has nothing to abort.
func (f *Libvirt) AbortMigration(h virt.Domain) error {
	return f.call("AbortMigration")
}

// MigratableXML is the domain's XML.
func (f *Libvirt) MigratableXML(h virt.Domain) (string, error) {
	var x string
	err := f.power("MigratableXML", h, func(d *Domain) error { x = d.XML; return nil })
	return x, err
}
