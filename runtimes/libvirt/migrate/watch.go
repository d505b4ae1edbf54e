package migrate

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// arrivalPoll is how often a prepared target looks for its VM.
const arrivalPoll = 500 * time.Millisecond

// watchArrival follows a prepared target on its own, whoever drives its
// migration: its VM is recorded arrived once its domain runs here (a
// driver that died after the switch-over loses nothing), and the target
// fails when the arriving domain goes away, or when no migration began
// within the target timeout. It ends once the target waits no more, or
// for another migration (token).
func (r *Room) watchArrival(id, token string) {
	tick := time.NewTicker(arrivalPoll)
	defer tick.Stop()
	seen := false
	for range tick.C {
		c, err := r.Store.Container(id)
		if err != nil || !c.AwaitsMigration() || c.Migration.Token != token || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return
		}
		st, exists, known := r.domainState(c.Domain)
		switch {
		case !known: // libvirtd away: look again
		case exists && st == virt.StateRunning:
			if _, err := r.FinishMigration(context.Background(), id, ""); err != nil {
				r.Log.Warn("record a VM that arrived", "container", id, "err", err)
			}
			return
		case exists:
			seen = true // paused: arriving
		case seen:
			r.failPrepared(id, token, "the migration failed: the arriving VM is gone from this node")
			return
		case time.Now().UnixNano() > c.Migration.Deadline:
			r.failPrepared(id, token, "no migration of its VM began within the target timeout")
			return
		}
	}
}

// domainState reads a domain's state: exists is false for none, known
// false when libvirt could not tell.
func (r *Room) domainState(name string) (st virt.State, exists, known bool) {
	l, err := r.Conn.Get()
	if err != nil {
		return 0, false, false
	}
	dom, err := l.Lookup(name)
	if err != nil {
		return 0, false, errdefs.IsNotFound(err)
	}
	st, err = l.State(dom)
	return st, err == nil, err == nil
}

// failPrepared fails target id if it still waits for migration token.
func (r *Room) failPrepared(id, token, why string) {
	c, unlock, err := r.lockTarget(id)
	if err != nil {
		return
	}
	defer unlock()
	if c.Migration.Token != token {
		return
	}
	if err := r.FailTarget(c, why); err != nil {
		r.Log.Warn("record a failed migration target", "container", id, "err", err)
	}
}

// arrivedRunning: target c's VM runs here, arrived (an arriving one is
// paused until the switch-over).
func (r *Room) arrivedRunning(c *store.Container) bool {
	st, exists, known := r.domainState(c.Domain)
	return known && exists && st == virt.StateRunning
}

// arrivedBefore answers a FinishMigration of a VM already recorded
// arrived (by watchArrival, or by a driver before): its result again.
// Any other container not waiting is notWaiting.
func (r *Room) arrivedBefore(id string, notWaiting error) (vmtypes.MigrationResult, error) {
	c, unlock, err := r.LockVM(id)
	if err != nil {
		return vmtypes.MigrationResult{}, err
	}
	defer unlock()
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil || !sb.Arrived || c.Migration != nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return vmtypes.MigrationResult{}, notWaiting
	}
	res := vmtypes.MigrationResult{Note: sb.ArrivalNote}
	if l, err := r.Conn.Get(); err == nil {
		if dom, err := l.Lookup(c.Domain); err == nil {
			if p, ok, err := l.CompletedMigration(dom); err == nil && ok {
				res.Downtime = p.Downtime
			}
		}
	}
	if sb.Net != nil {
		for _, a := range sb.Net.Addresses() {
			res.Addresses = append(res.Addresses, a.IP)
		}
	}
	return res, nil
}
