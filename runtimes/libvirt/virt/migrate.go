package virt

import "time"

// Migrations move a running domain to another node's libvirtd, live.
// libvirt drives them peer to peer: this libvirtd connects to
// the peer's over libvirt's TLS, and qemu's streams (memory, and the NBD
// copy of local disks) go over unix sockets that crimux carries between
// the nodes (migproxy), so qemu never listens on a node's address.
type Migrations interface {
	// ShutoffMigrated: d is shut off because it migrated away (libvirt's
	// state reason), as a crimux that was down when it did learns.
	ShutoffMigrated(d Domain) (bool, error)
	// MigratableXML is d's running definition as a target may take it.
	MigratableXML(d Domain) (string, error)
	// Migrate moves d to the libvirtd at m.PeerURI and returns when the
	// move is over: d then runs on the peer, and here it is shut off
	// (StopMigrated), still defined. On any error d keeps running here.
	Migrate(d Domain, m Migration) error
	// MigrationProgress reads d's migration job while it runs; ok is
	// false when d has none.
	MigrationProgress(d Domain) (p MigrationProgress, ok bool, err error)
	// AbortMigration cancels d's migration job; d keeps running here.
	AbortMigration(d Domain) error
	// CompletedMigration is the last finished migration job of d as
	// libvirt keeps it (on the target: the incoming one), with the
	// downtime it measured; it stays for the next read (libvirt drops it
	// after a read unless asked to keep it).
	CompletedMigration(d Domain) (p MigrationProgress, ok bool, err error)
}

// Migration is how a domain moves.
type Migration struct {
	// PeerURI is the target libvirtd (qemu+tls://host/system?pkipath=…).
	PeerURI string
	// DestXML is the domain as the target runs it; DestName its name there.
	DestXML, DestName string
	// MemoryURI and DisksURI are qemu's streams: unix:///… paths that
	// are the same on both nodes.
	MemoryURI, DisksURI string
	// Disks are the targets (vda) whose local files are copied: only
	// their top layer, the target having the image's base.
	Disks []string
	// BandwidthMiB caps the memory stream (MiB/s; 0: libvirt's default).
	BandwidthMiB uint64
	// AutoConverge slows the guest's vCPUs when its memory is dirtied
	// faster than it moves.
	AutoConverge bool
	// MaxDowntime is the pause qemu may take to switch over (0: qemu's
	// default, 300 ms).
	MaxDowntime time.Duration
}

// MigrationProgress is a migration job as libvirt reports it.
type MigrationProgress struct {
	Elapsed time.Duration
	// Bytes of memory and disk together.
	DataTotal, DataProcessed, DataRemaining uint64
	// DirtyRate is the guest's memory dirtied per second, in bytes.
	DirtyRate uint64
	// Iteration is qemu's pass over the guest's memory.
	Iteration uint64
	// Downtime is the switch-over's pause, once the job is complete.
	Downtime time.Duration
}
