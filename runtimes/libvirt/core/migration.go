package core

// Exit reasons of live migration (issue 42).
const (
	// ReasonMigrated: the VM left this node, live; it runs on another.
	ReasonMigrated = "Migrated"
	// ReasonMigrationFailed: the VM this target pod waited for never
	// arrived; it still runs on its source.
	ReasonMigrationFailed = "MigrationFailed"
	// ExitMigrationFailed is a failed target's exit code.
	ExitMigrationFailed = 1
)

// Note writes msg into VM id's log (kubectl logs), as a crimux line.
func (r *Runtime) Note(id, msg string) { r.note(id, msg) }
