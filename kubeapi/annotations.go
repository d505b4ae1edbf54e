package kubeapi

// The node agent's annotations of a VM pod (nodeagent/doc.go says what
// each does).

// Request annotations, set by users.
const (
	AnnotationPowerState      = "crimux.io/power-state"
	AnnotationRebootRequest   = "crimux.io/reboot-request"
	AnnotationSnapshotRequest = "crimux.io/snapshot-request"
	AnnotationRestoreRequest  = "crimux.io/restore-request"
	// AnnotationSnapshotDeleteRequest: <snapshot name>, deleted once.
	AnnotationSnapshotDeleteRequest = "crimux.io/snapshot-delete-request"
)

// Result annotations, written by the node agent.
const (
	AnnotationObservedPowerState = "crimux.io/observed-power-state"
	AnnotationPowerStateError    = "crimux.io/power-state-error"
	AnnotationRebootResult       = "crimux.io/reboot-result"
	AnnotationSnapshotResult     = "crimux.io/snapshot-result"
	AnnotationRestoreResult      = "crimux.io/restore-result"
	// AnnotationSnapshotDeleteResult: "<name>: deleted" or
	// "<name>: failed: <why>".
	AnnotationSnapshotDeleteResult = "crimux.io/snapshot-delete-result"
	// AnnotationSnapshots: the VM's snapshots, a JSON array of
	// SnapshotEntry (snapshots.go).
	AnnotationSnapshots = "crimux.io/snapshots"
)
