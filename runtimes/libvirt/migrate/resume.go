package migrate

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// ResumeMigrations picks up, once crimux is back, the migrations it was
// part of when it stopped (after libvirt's domains were resynced: a VM
// that left meanwhile is recorded Migrated by then). A source's
// migration ended with crimux (its streams were crimux's): the record
// forgets it. A target still waiting waits out what is left of its time;
// one whose streams were readied took its VM if that runs here, and
// otherwise failed with them.
func (r *Room) ResumeMigrations(ctx context.Context) {
	recs, err := r.Store.LiveContainers()
	if err != nil {
		r.Log.Warn("resume migrations: list VM records", "err", err)
		return
	}
	for _, c := range recs {
		switch {
		case c.Migration == nil:
		case !c.Migration.Incoming:
			r.forgetOutgoing(c.ID)
		case c.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			r.resumeTarget(ctx, c)
		}
	}
}

func (r *Room) forgetOutgoing(id string) {
	c, unlock, err := r.LockContainer(id)
	if err != nil {
		return
	}
	defer unlock()
	if c.Migration != nil && !c.Migration.Incoming {
		c.Migration = nil
		_ = r.Store.PutContainer(c)
	}
}

// resumeTarget: see ResumeMigrations.
func (r *Room) resumeTarget(ctx context.Context, c *store.Container) {
	if c.Migration.Token == "" && r.MigrationNode() != nil {
		left := time.Until(time.Unix(0, c.Migration.Deadline))
		time.AfterFunc(max(left, 0), func() { r.targetTimedOut(c.ID) })
		return
	}
	if _, err := r.FinishMigration(ctx, c.ID, ""); err == nil {
		return
	}
	why := "crimux restarted while its VM was arriving: the migration's streams were lost"
	if r.MigrationNode() == nil {
		why = "live migration is off on this node now (libvirt.migration)"
	}
	if _, err := r.FinishMigration(ctx, c.ID, why); err != nil {
		r.Log.Warn("end a migration target after a restart", "container", c.ID, "err", err)
	}
}
