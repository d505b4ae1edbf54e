// Package vmcounters owns what the VM runtime counts: the Counters the
// daemon injects (its metrics), the labels the runtime's rooms count
// by, and None, which counts nothing.
package vmcounters

import "time"

// Counters is what the VM runtime counts, injected by the daemon
// (*metrics.Metrics implements it). Each label is one of a few values,
// named below or in core's migration.go.
type Counters interface {
	// GCRemoved counts n resources of a kind the collector removed.
	GCRemoved(kind string, n int)
	// Reconnected counts a reconnect to a daemon at target.
	Reconnected(target string)
	// MigrationProgress follows a VM leaving the node (container ID).
	MigrationProgress(container string, remaining, dirtyRate uint64)
	// MigrationEnded counts a migration of a VM in a role (outgoing,
	// incoming) that ended with a result (succeeded, failed).
	MigrationEnded(container, role, result string)
	// MigrationTook times a migration in a role (MigrationSource,
	// MigrationTarget) that ended with a result (succeeded, failed).
	MigrationTook(role, result string, d time.Duration)
	// MigrationDowntime records the pause of an arrived VM's
	// switch-over, as libvirt measured it.
	MigrationDowntime(d time.Duration)
	// AgentCallRefused counts a guest-agent call refused at a full cap
	// (AgentCapVM, AgentCapNode) for a reason (AgentBusy, AgentStuck).
	AgentCallRefused(whichCap, reason string)
	// AgentCallWaited times a guest-agent call's wait for a slot.
	AgentCallWaited(d time.Duration)
	// TemplateClone counts a VM that asked for its template and started
	// (CloneRestored, CloneBooted).
	TemplateClone(result string)
	// TemplateMakingEnded counts a template's making that ended
	// (MakingReady, MakingFailed, MakingCancelled).
	TemplateMakingEnded(result string)
	// GuestBoot counts what a boot watch found (bootwatch.ResultBooted,
	// ResultLate, ResultStuck).
	GuestBoot(result string)
}

// The roles of timed migrations (MigrationTook): the node the VM left,
// and the one it arrived on; crimux_migrations_total's role labels.
const (
	MigrationSource = "outgoing"
	MigrationTarget = "incoming"
)

// The caps a guest-agent call is refused at, and why: the calls filling
// it are being answered (busy), or the VM's agent answered none lately
// (stuck). As virt.AgentSlots reports them.
const (
	AgentCapVM   = "vm"
	AgentCapNode = "node"
	AgentBusy    = "busy"
	AgentStuck   = "stuck"
)

// How a VM that asked for its template started, and how a template's
// making ended (cancelled: no pod asked for it any more).
const (
	CloneRestored   = "restored"
	CloneBooted     = "booted"
	MakingReady     = "ready"
	MakingFailed    = "failed"
	MakingCancelled = "cancelled"
)

// None counts nothing.
type None struct{}

func (None) GCRemoved(string, int)                       {}
func (None) Reconnected(string)                          {}
func (None) MigrationProgress(string, uint64, uint64)    {}
func (None) MigrationEnded(string, string, string)       {}
func (None) MigrationTook(string, string, time.Duration) {}
func (None) MigrationDowntime(time.Duration)             {}
func (None) AgentCallRefused(string, string)             {}
func (None) AgentCallWaited(time.Duration)               {}
func (None) TemplateClone(string)                        {}
func (None) TemplateMakingEnded(string)                  {}
func (None) GuestBoot(string)                            {}
