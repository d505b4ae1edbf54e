package core

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
)

// Exit reasons of live migration.
const (
	// ReasonMigrated: the VM left this node, live; it runs on another.
	ReasonMigrated = "Migrated"
	// ReasonMigrationFailed: the VM this target pod waited for never
	// arrived; it still runs on its source.
	ReasonMigrationFailed = "MigrationFailed"
	// ExitMigrationFailed is a failed target's exit code.
	ExitMigrationFailed = 1
)

// The roles and results migrations are counted by (vmcounters.Counters).
const (
	MigrationOutgoing  = "outgoing"
	MigrationIncoming  = "incoming"
	MigrationSucceeded = "succeeded"
	MigrationFailed    = "failed"
)

// Note writes msg into VM id's log (kubectl logs), as a crimux line.
func (r *Runtime) Note(id, msg string) { r.note(id, msg) }

// ShutoffMigrated: libvirt says d is shut off because it migrated away.
func (r *Runtime) ShutoffMigrated(l virt.Libvirt, d virt.Domain) bool {
	away, err := l.ShutoffMigrated(d)
	return err == nil && away
}

// MigratedAway records that VM id left this node by live migration: its
// container exits (Migrated), and its pod, whose disk is the VM's past,
// boots no VM again (CreateContainer refuses).
func (r *Runtime) MigratedAway(id, msg string) {
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return
	}
	defer unlock()
	if sb, err := r.Store.Sandbox(c.SandboxID); err == nil && !sb.MigratedAway {
		sb.MigratedAway = true
		if err := r.Store.PutSandbox(sb); err != nil {
			r.Log.Error("record a pod whose VM migrated away", "sandbox", sb.ID, "err", err)
		}
	}
	c.Migration = nil
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		_ = r.Store.PutContainer(c)
		return
	}
	if err := r.SaveExit(c, ExitClean, ReasonMigrated, msg); err != nil {
		r.Log.Error("record VM exit", "container", c.ID, "err", err)
	}
	r.Log.Info("VM exited", "container", c.ID, "reason", ReasonMigrated)
}

// stopWaitingTarget stops a migration target whose VM has not arrived.
func (r *Runtime) stopWaitingTarget(c *store.Container) error {
	return r.FailTarget(c, "stopped while waiting for its VM to arrive by live migration")
}

// FailTarget ends migration target c, whose VM did not arrive; the
// caller holds its pod's lock. Its streams are refused from now on,
// whatever of the VM reached this node is destroyed (RemoveContainer
// removes the rest, as of any VM), and the container exits
// MigrationFailed saying why.
func (r *Runtime) FailTarget(c *store.Container, why string) error {
	r.Migration.Forget(c.ID)
	if l, err := r.Conn.Get(); err == nil {
		if dom, err := l.Lookup(c.Domain); err == nil {
			_ = l.Destroy(dom)
		}
	}
	r.TargetTook(c, MigrationFailed)
	c.Migration.Incoming = false
	r.Opts.Counters.MigrationEnded(c.ID, MigrationIncoming, MigrationFailed)
	r.Note(c.ID, "live migration failed: "+why)
	r.Log.Info("VM migration target failed", "container", c.ID, "why", why)
	return r.SaveExit(c, ExitMigrationFailed, ReasonMigrationFailed, why)
}

// TargetTook times target c's migration, which ended with result, from
// its preparation: a target that was never prepared took part in no
// migration and is not timed (it is counted, MigrationEnded).
func (r *Runtime) TargetTook(c *store.Container, result string) {
	if c.Migration == nil || c.Migration.PreparedAt == 0 {
		return
	}
	r.Opts.Counters.MigrationTook(vmcounters.MigrationTarget, result, time.Since(time.Unix(0, c.Migration.PreparedAt)))
}

// MigrationNode is this node's part in live migrations; nil: VMs neither
// leave nor arrive.
func (r *Runtime) MigrationNode() *migration.Node { return r.Migration }
