package virtfake

import (
	"sync"

	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// migrateHooks are the hooks SetMigrateHook set, by fake libvirtd.
var migrateHooks sync.Map // *Libvirt -> func(virt.Migration) error

// SetMigrateHook makes every Migrate call hook first, once it has
// recorded the migration and without the fake's lock held: hook may
// block (a migration that takes its time) or call the fake. An error it
// returns is Migrate's, and nothing moves; nil lets the migration go on.
// A nil hook removes it.
func (f *Libvirt) SetMigrateHook(hook func(virt.Migration) error) {
	if hook == nil {
		migrateHooks.Delete(f)
		return
	}
	migrateHooks.Store(f, hook)
}

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
	if hook, ok := migrateHooks.Load(f); ok {
		if err := hook.(func(virt.Migration) error)(m); err != nil {
			return err
		}
	}
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
		d.State, d.MigratedAway = virt.StateShutoff, true
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

// ShutoffMigrated: the domain is shut off because it migrated away.
func (f *Libvirt) ShutoffMigrated(h virt.Domain) (bool, error) {
	var away bool
	err := f.power("ShutoffMigrated", h, func(d *Domain) error {
		away = d.State == virt.StateShutoff && d.MigratedAway
		return nil
	})
	return away, err
}
