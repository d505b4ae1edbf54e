package nodeagent

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// fakeMigration scripts the fake VM API's migration calls.
type fakeMigration struct {
	sourceErr, prepareErr, finishErr error
	// run, if set, is Migrate's body: it may send progress, and returns
	// Migrate's error. nil: Migrate succeeds at once.
	run func(ctx context.Context, send func(*vmv1.MigrateProgress) error) error
	// arrivesAnyway: FinishMigration told the migration failed finds the
	// VM here, running; otherwise the container exits.
	arrivesAnyway bool
	// prepared is the last PrepareMigration request, migrated the last
	// Migrate's.
	prepared *vmv1.PrepareMigrationRequest
	migrated *vmv1.MigrateRequest
}

// The fake's answers.
var (
	fakeSource = &vmv1.MigrationSource{DomainXml: "<domain>source</domain>", GuestMac: "52:54:00:00:00:01", ImageDigest: "sha256:abc"}
	fakeTarget = &vmv1.MigrationTarget{LibvirtUri: "qemu+tls://node2/system", Address: "node2:7443", Token: "tok1",
		DomainXml: "<domain>target</domain>", DomainName: "crimux-vm1-moved", Disks: []string{"vda"}}
	fakeFinish = &vmv1.FinishMigrationResponse{DowntimeMs: 84, Addresses: []string{"10.0.0.7"}}
)

// record notes a call without the before-act hook: the agent does not
// record migration calls started (migrate_source.go records Migrate's).
func (f *fakeVMs) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeVMs) GetMigrationSource(ctx context.Context, _ *vmv1.GetMigrationSourceRequest) (*vmv1.GetMigrationSourceResponse, error) {
	f.record("GetMigrationSource")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mig.sourceErr != nil {
		return nil, f.mig.sourceErr
	}
	return &vmv1.GetMigrationSourceResponse{Source: fakeSource}, ctx.Err()
}

func (f *fakeVMs) PrepareMigration(ctx context.Context, req *vmv1.PrepareMigrationRequest) (*vmv1.PrepareMigrationResponse, error) {
	f.record("PrepareMigration")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mig.prepared = req
	if f.mig.prepareErr != nil {
		return nil, f.mig.prepareErr
	}
	return &vmv1.PrepareMigrationResponse{Target: fakeTarget}, ctx.Err()
}

// MigrateFollowing runs the script; a success leaves the source's container
// exited (Migrated), as the VM runtime does.
func (f *fakeVMs) MigrateFollowing(ctx context.Context, req *vmv1.MigrateRequest, progress func(*vmv1.MigrateProgress)) error {
	f.record("Migrate " + req.GetTarget().GetToken())
	f.mu.Lock()
	f.mig.migrated = req
	run := f.mig.run
	f.mu.Unlock()
	var err error
	if run != nil {
		err = run(ctx, func(m *vmv1.MigrateProgress) error {
			progress(m)
			return ctx.Err()
		})
	}
	if err == nil {
		f.mu.Lock()
		f.state, f.container = vmv1.PowerState_POWER_STATE_UNSPECIFIED, containerExited
		f.mu.Unlock()
	}
	return err
}

func (f *fakeVMs) FinishMigration(ctx context.Context, req *vmv1.FinishMigrationRequest) (*vmv1.FinishMigrationResponse, error) {
	call := "FinishMigration"
	if req.GetFailed() != "" {
		call += " failed: " + req.GetFailed()
	}
	f.record(call)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mig.finishErr != nil {
		return nil, f.mig.finishErr
	}
	if req.GetFailed() != "" && !f.mig.arrivesAnyway {
		f.state, f.container = vmv1.PowerState_POWER_STATE_UNSPECIFIED, containerExited
		return &vmv1.FinishMigrationResponse{}, ctx.Err()
	}
	return fakeFinish, ctx.Err()
}

// Pod names of the tests' migration: S is the harness's pod, default/vm1;
// T is the pod it moves to.
const (
	sourceKey  = "default/vm1"
	targetName = "vm1-moved"
)

// newSource is a harness over S, running, asked to move to T.
func newSource(t *testing.T, annotations map[string]string) *harness {
	t.Helper()
	a := map[string]string{kubeapi.AnnotationMigrateTo: targetName}
	maps.Copy(a, annotations)
	return newHarness(t, running, a)
}

// newTarget is a harness over T, its VM container waiting (running).
func newTarget(t *testing.T, annotations map[string]string) *harness {
	t.Helper()
	a := map[string]string{kubeapi.AnnotationMigrateFrom: sourceKey}
	maps.Copy(a, annotations)
	h := newHarness(t, running, a)
	h.pod.Name = targetName
	h.vms.container = "CONTAINER_RUNNING"
	return h
}

// nudges collects the pods a Migrate goroutine asks passes over.
func (h *harness) nudges() chan string {
	ch := make(chan string, 100)
	h.rec.enqueue = func(key string) { ch <- key }
	return ch
}

// awaitNudge waits for a nudge of S.
func awaitNudge(t *testing.T, ch chan string) {
	t.Helper()
	select {
	case key := <-ch:
		if key != sourceKey {
			t.Fatalf("nudged %q, want %q", key, sourceKey)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pass asked for")
	}
}

// js is v's JSON, as an annotation value.
func js(t *testing.T, v any) string {
	t.Helper()
	s, err := kubeapi.EncodeAnnotation(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// decoded reads the pod's annotation key into v; false if absent.
func (h *harness) decoded(key string, v any) bool {
	h.t.Helper()
	s, ok := h.pod.Annotations[key]
	if !ok {
		return false
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		h.t.Fatalf("%s = %q: %v", key, s, err)
	}
	return true
}

// targetAnswer is T's migration-target as the plugin copies it to S.
func targetAnswer(source, token string) kubeapi.MigrationTarget {
	return kubeapi.MigrationTarget{Source: source, LibvirtURI: fakeTarget.LibvirtUri, Address: fakeTarget.Address, Token: token,
		DomainXML: fakeTarget.DomainXml, DomainName: fakeTarget.DomainName, Disks: fakeTarget.Disks}
}
