package vmtypes

import (
	"context"
	"time"
)

// Migrator moves running VMs between nodes, live. A registry
// ability of its own. A migration takes four calls, made by whoever
// drives it (crimuxctl vm migrate, the kubectl plugin through the node
// agents): MigrationSource on the source, PrepareMigration on the target
// (whose VM pod was made with the crimux.io/migrate-from annotation),
// Migrate on the source, FinishMigration on the target.
type Migrator interface {
	// MigrationSource describes the running VM of container id as a
	// target needs it.
	MigrationSource(ctx context.Context, id string) (MigrationSource, error)
	// PrepareMigration readies target container id to receive src.
	PrepareMigration(ctx context.Context, id string, src MigrationSource) (MigrationTarget, error)
	// Migrate moves the VM of container id to t; progress hears how it
	// goes. When it returns nil the VM runs on the target, and container
	// id has exited here with reason Migrated; otherwise it runs here.
	Migrate(ctx context.Context, id string, t MigrationTarget, progress func(MigrationProgress)) error
	// FinishMigration ends the target's side: the VM arrived (failed
	// "") and takes its pod's network, or it did not, and container id
	// exits with reason MigrationFailed saying failed.
	FinishMigration(ctx context.Context, id, failed string) (MigrationResult, error)
}

// MigrationSource is a running VM as its target needs it.
type MigrationSource struct {
	// DomainXML is its migratable libvirt definition.
	DomainXML string
	// GuestMAC is its NIC's MAC in the guest ("" without a pod network).
	GuestMAC string
	// ImageDigest is its image's manifest digest: the target pod must
	// run the same image (the root disk's top layer moves onto the
	// target's copy of its base).
	ImageDigest string
	// Seal is the source node's signature of all the above.
	Seal Seal
}

// MigrationTarget is where a VM goes: the target node's libvirtd and
// streams endpoint, the token of this migration, and the domain as the
// target runs it.
type MigrationTarget struct {
	LibvirtURI, Address, Token string
	DomainXML, DomainName      string
	Disks                      []string
	// Seal is the target node's signature of all the above.
	Seal Seal
}

// Seal is a node's signature of a migration's description: the source's
// VM, the target's domain and endpoint. They travel through whoever
// drives the migration (pod annotations a tenant can write), so the node
// that acts on one opens its seal first.
type Seal struct {
	// Certificates is the signer's chain, leaf first, DER.
	Certificates [][]byte
	Signature    []byte
	SignedAt     time.Time
}

// MigrationProgress is a running migration's progress.
type MigrationProgress struct {
	Elapsed                                            time.Duration
	DataTotal, DataProcessed, DataRemaining, DirtyRate uint64
	Iteration                                          uint64
}

// MigrationResult is the target's account of a finished migration.
type MigrationResult struct {
	// Downtime is the switch-over's pause as libvirt measured it.
	Downtime time.Duration
	// Addresses are the VM's addresses now (its new pod's).
	Addresses []string
	// Note says what could not be done (a guest without an agent keeps
	// its old address until it asks DHCP again).
	Note string
}
