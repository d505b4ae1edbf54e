package nodeagent

import (
	"context"
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// The agent's half of kubectl crimux migrate (kubeapi/migration.go has
// the protocol): steps 2 and 6 on the source pod S (migrate_source.go,
// migrate_run.go), 4 and 8 on the target pod T (migrate_target.go).

// progressEvery bounds how often crimux.io/migration-progress is
// written: Migrate reports every half second, and each write is a pod
// update every watcher of the pod hears.
const progressEvery = 2 * time.Second

// Event reasons of a migration.
const (
	ReasonMigrationPrepared = "MigrationPrepared"       // T: ready to receive the VM
	ReasonMigrationStarted  = "MigrationStarted"        // S: Migrate called
	ReasonMigrated          = "Migrated"                // S: the VM left for T
	ReasonMigrationArrived  = "MigrationArrived"        // T: the VM arrived
	ReasonMigrationFailed   = "kubeapi.MigrationFailed" // S or T: a step failed
)

// migrateKind keys a source's Migrate in its pod's record: the token of
// the last one started, and how it ended.
const migrateKind = "migrate"

// podMigration is what the agent keeps in memory of one pod's migration.
// The worker alone reads and writes it (a running Migrate has its own
// lock, migrationRun).
type podMigration struct {
	// prepared (T) and finished (T) are the answers of PrepareMigration
	// and FinishMigration, which are not called twice for the same
	// source, or token: should their patch be lost, the next pass writes
	// them again from here.
	prepared, finished *answer
	// run is S's Migrate, under way or ended (migrate_run.go).
	run *migrationRun
}

// answer is an annotation a migration step wrote, about (the source, a
// token) it answers, and the event announcing it.
type answer struct {
	about string
	key   string
	value any
	ev    event
}

// apply writes the answer on the pod, announcing it whenever it is new
// there (again after a lost patch, as results are).
func (a *answer) apply(p *pass) {
	if p.setJSON(a.key, a.value) {
		p.event(a.ev.eventType, a.ev.reason, a.ev.message)
	}
}

// migration is the state of pod uid, made when first needed.
func (r *reconciler) migration(uid types.UID) *podMigration {
	if r.migrations == nil {
		r.migrations = map[types.UID]*podMigration{}
	}
	m := r.migrations[uid]
	if m == nil {
		m = &podMigration{}
		r.migrations[uid] = m
	}
	return m
}

// forgetMigration drops a deleted pod's state; a Migrate still under way
// for it is cancelled (the VM stays where it is).
func (r *reconciler) forgetMigration(uid types.UID) {
	if m := r.migrations[uid]; m != nil && m.run != nil {
		m.run.cancel()
	}
	delete(r.migrations, uid)
}

// migrate takes the pod's part in a migration: a target's steps (while
// its VM has not arrived), else a source's (when it has a migrate-to).
// vm is the VM API's view of the pod's VM. An error retries the pass.
func (r *reconciler) migrate(ctx context.Context, p *pass, vm *vmv1.VM) error {
	if p.arriving() {
		if err := r.prepare(ctx, p, vm); err != nil {
			return err
		}
		return r.finish(ctx, p)
	}
	to, _ := p.current(kubeapi.AnnotationMigrateTo)
	if to == "" {
		return nil
	}
	if err := r.describe(ctx, p, to); err != nil {
		return err
	}
	return r.migrateOut(ctx, p, to)
}

// arriving: the pod is a migration target (migrate-from) whose VM has
// not arrived. Until then its container runs with no qemu of its own and
// the VM API reports it Running (its domain shut off, undefined, or
// paused while the VM comes in), so power-state, the requests and
// observed-power-state are held: a SetPowerState would act on the
// target's own, never-started domain, or on the one arriving. A target
// the agents prepared (its own migration-target is there) has arrived
// once its finish says Succeeded for that token; one moved otherwise
// (crimuxctl vm migrate) once its domain runs. Arrived, it is a VM pod
// like any other, a source of its next move.
func (p *pass) arriving() bool {
	from, _ := p.current(kubeapi.AnnotationMigrateFrom)
	if from == "" {
		return false
	}
	var tgt kubeapi.MigrationTarget
	if !p.decode(kubeapi.AnnotationMigrationTarget, &tgt) || tgt.Source != from {
		return p.domain != "running" && p.domain != "blocked"
	}
	var fin kubeapi.MigrationFinish
	return !(p.decode(kubeapi.AnnotationMigrationFinish, &fin) && fin.Token == tgt.Token && fin.Phase == kubeapi.MigrationSucceeded)
}

// decode reads the JSON of annotation key, as the pass leaves it, into
// v: false when absent or not such JSON (a value mangled by hand answers
// nothing).
func (p *pass) decode(key string, v any) bool {
	s, ok := p.current(key)
	if !ok {
		return false
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		p.log.Debug("node agent: migration annotation not understood; ignored", "annotation", key, "err", err)
		return false
	}
	return true
}

// setJSON is set with v's JSON.
func (p *pass) setJSON(key string, v any) bool {
	s, err := kubeapi.EncodeAnnotation(v)
	if err != nil { // plain structs: cannot happen
		p.log.Error("node agent: migration annotation not encoded", "annotation", key, "err", err)
		return false
	}
	return p.set(key, &s)
}

// podKey is the pod as migrate-from and MigrationTarget.Source name it.
func (p *pass) podKey() string { return p.pod.Namespace + "/" + p.pod.Name }

// refuseMigration answers, on a pod that is not a VM, the migration
// step it is asked for (2 on a source, 4 on a target) with a Failed
// result, so that the controller does not wait for it; whether that changed
// the pod.
func (p *pass) refuseMigration(msg string) bool {
	res := kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: "the pod is not a VM: " + msg}
	var src kubeapi.MigrationSource
	if p.arriving() {
		from, _ := p.current(kubeapi.AnnotationMigrateFrom)
		if p.decode(kubeapi.AnnotationMigrationSource, &src) && src.Target == p.pod.Name && !p.preparedFor(from) {
			return p.setJSON(kubeapi.AnnotationMigrationResult, res)
		}
		return false
	}
	to, _ := p.current(kubeapi.AnnotationMigrateTo)
	if to == "" || p.decode(kubeapi.AnnotationMigrationSource, &src) && src.Target == to {
		return false
	}
	return p.setJSON(kubeapi.AnnotationMigrationResult, res)
}
