package kubeapi

// crimux.io/snapshots is the node agent's list of a VM pod's snapshots,
// for kubectl crimux snapshot list: compact JSON, an array of
// SnapshotEntry, oldest first, as the VM API lists them:
//
//	[{"name":"base","created":"2026-12-01T12:00:00Z","description":"..."}]
//
// The agent writes it on the first pass it makes over the pod (after each
// crimux start too) and after each snapshot it creates, restores or
// deletes; not after snapshots changed on the node by other means
// (crimuxctl), until one of those. JSON rather than a line format: names
// are [A-Za-z0-9._-], but descriptions are free text (crimuxctl sets
// them), which JSON quotes.
//
// Bounded, an annotation being part of the pod's 256 KiB of them: at most
// MaxListedSnapshots entries (the newest, should a VM have more: its cap,
// libvirt.max_snapshots_per_vm, is 8 by default), descriptions cut to
// MaxSnapshotDescription bytes (ending "…" when cut) with control
// characters made spaces, and no HTML escaping, so the value stays under
// 24 KiB.
const (
	MaxListedSnapshots     = 64
	MaxSnapshotDescription = 120
)

// SnapshotEntry is one snapshot in crimux.io/snapshots.
type SnapshotEntry struct {
	Name string `json:"name"`
	// Created is when it was taken, RFC 3339 in UTC; empty if libvirt
	// does not say.
	Created     string `json:"created,omitempty"`
	Description string `json:"description,omitempty"`
}
