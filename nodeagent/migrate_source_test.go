package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

func TestDescribeSource(t *testing.T) {
	described := kubeapi.MigrationSource{Target: targetName, DomainXML: fakeSource.DomainXml, GuestMAC: fakeSource.GuestMac,
		ImageDigest: fakeSource.ImageDigest}
	refusal := kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: "GetMigrationSource (for target pod vm1-moved): vm: shares: failed precondition"}
	tests := []struct {
		name        string
		annotations map[string]string
		sourceErr   error
		wantCalls   []string
		want        *kubeapi.MigrationSource // nil: none
		wantResult  *kubeapi.MigrationResult // nil: none
		wantReasons []string
	}{
		{name: "described once", wantCalls: []string{"GetMigrationSource"}, want: &described},
		{name: "a description for an earlier target is replaced",
			annotations: map[string]string{kubeapi.AnnotationMigrationSource: js(t, kubeapi.MigrationSource{Target: "vm1-old", DomainXML: "<old/>"})},
			wantCalls:   []string{"GetMigrationSource"}, want: &described},
		{name: "described for this target already",
			annotations: map[string]string{kubeapi.AnnotationMigrationSource: js(t, described)}, want: &described},
		{name: "refused: a result without a token",
			sourceErr: fmt.Errorf("vm: shares: %w", errdefs.ErrFailedPrecondition),
			wantCalls: []string{"GetMigrationSource"}, wantResult: &refusal, wantReasons: []string{ReasonMigrationFailed}},
		{name: "an earlier refusal goes once described",
			annotations: map[string]string{kubeapi.AnnotationMigrationResult: js(t, refusal)},
			wantCalls:   []string{"GetMigrationSource"}, want: &described},
		{name: "an earlier attempt's result stays",
			annotations: map[string]string{kubeapi.AnnotationMigrationResult: js(t, kubeapi.MigrationResult{Token: "tok0", Phase: kubeapi.MigrationSucceeded})},
			wantCalls:   []string{"GetMigrationSource"}, want: &described,
			wantResult: &kubeapi.MigrationResult{Token: "tok0", Phase: kubeapi.MigrationSucceeded}},
		{name: "a target is no source", annotations: map[string]string{kubeapi.AnnotationMigrateFrom: "default/vm0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSource(t, tt.annotations)
			h.vms.mig.sourceErr = tt.sourceErr
			_, _, events := h.pass()
			if got := h.vms.actions(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls = %q, want %q", got, tt.wantCalls)
			}
			var src kubeapi.MigrationSource
			if ok := h.decoded(kubeapi.AnnotationMigrationSource, &src); ok != (tt.want != nil) || ok && !equalJSON(t, src, *tt.want) {
				t.Errorf("migration-source = %+v (present %v), want %+v", src, ok, tt.want)
			}
			var res kubeapi.MigrationResult
			if ok := h.decoded(kubeapi.AnnotationMigrationResult, &res); ok != (tt.wantResult != nil) || ok && res != *tt.wantResult {
				t.Errorf("migration-result = %+v (present %v), want %+v", res, ok, tt.wantResult)
			}
			if got := reasons(events); !slices.Equal(got, tt.wantReasons) {
				t.Errorf("events = %q, want %q", got, tt.wantReasons)
			}
			// Passed over again: nothing new (a refusal is asked again,
			// GetMigrationSource only reads, but not rewritten).
			_, patches, events := h.pass()
			if len(patches) > 0 || len(events) > 0 {
				t.Errorf("second pass: patches %v, events %v; want none", patches, events)
			}
		})
	}
}

func equalJSON(t *testing.T, a, b any) bool { return js(t, a) == js(t, b) }

// sourceWithTarget is S once the plugin has copied T's answer to it.
func sourceWithTarget(t *testing.T, extra map[string]string) *harness {
	a := map[string]string{
		kubeapi.AnnotationMigrationSource: js(t, kubeapi.MigrationSource{Target: targetName, DomainXML: fakeSource.DomainXml}),
		kubeapi.AnnotationMigrationTarget: js(t, targetAnswer(sourceKey, "tok1")),
	}
	for k, v := range extra {
		a[k] = v
	}
	return newSource(t, a)
}

// Migrate runs in a goroutine: passes over the pod (and others) while it
// runs return at once and do not start it again; its end is written by
// the pass it asks for, once, and neither that nor a restart starts it
// again.
func TestMigrateStartedOnce(t *testing.T) {
	h := sourceWithTarget(t, nil)
	nudges := h.nudges()
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	h.vms.mig.run = func(context.Context, func(*vmv1.MigrateProgress) error) error {
		close(started)
		<-release
		return nil
	}
	// Should a pass wait for Migrate, this ends the wait, and the test
	// fails on the time it took rather than hang.
	watchdog := time.AfterFunc(5*time.Second, func() { releaseOnce.Do(func() { close(release) }) })
	defer watchdog.Stop()

	begin := time.Now()
	_, _, events := h.pass()
	<-started
	for range 5 {
		h.pass()
	}
	other := testPod(map[string]string{kubeapi.AnnotationPowerState: "Running"})
	other.Name, other.UID = "vm2", "6f1c2a5e-0000-4000-8000-000000000002"
	if _, err := h.rec.reconcile(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Fatalf("the passes took %s: the worker waited for Migrate", d)
	}
	if got := h.vms.actions(); !slices.Equal(got, []string{"Migrate tok1"}) {
		t.Fatalf("calls = %q, want Migrate once", got)
	}
	if got := reasons(events); !slices.Equal(got, []string{ReasonMigrationStarted}) {
		t.Errorf("events = %q, want MigrationStarted", got)
	}
	if req := h.vms.mig.migrated; req.GetTarget().GetAddress() != fakeTarget.Address || req.GetVm().GetPod().GetName() != "vm1" {
		t.Errorf("Migrate request = %v, want T's target for default/vm1", req)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests[migrateKind].Value != "tok1" || rec.Requests[migrateKind].Phase != phaseStarted {
		t.Errorf("record = %+v, want tok1 started", rec)
	}

	releaseOnce.Do(func() { close(release) })
	awaitNudge(t, nudges)
	h.rec.running.Wait()
	_, patches, events := h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res != (kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded}) {
		t.Errorf("migration-result = %+v (patches %v), want tok1 Succeeded", res, patches)
	}
	if got := reasons(events); !slices.Equal(got, []string{ReasonMigrated}) || events[0].eventType != corev1.EventTypeNormal {
		t.Errorf("events = %+v, want Normal Migrated", events)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests[migrateKind].Phase != phaseDone {
		t.Errorf("record = %+v, want tok1 done", rec)
	}

	h.vms.reset()
	h.pass()
	h.restart()
	h.pass()
	h.annotate(kubeapi.AnnotationMigrationResult, nil)
	h.restart()
	_, patches, events = h.pass()
	if got := h.vms.actions(); len(got) > 0 {
		t.Errorf("calls after the end and restarts = %q, want none", got)
	}
	if len(patches) != 1 || !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Token != "tok1" || res.Phase != kubeapi.MigrationSucceeded ||
		!slices.Equal(reasons(events), []string{ReasonMigrated}) {
		t.Errorf("result removed, crimux restarted: patches %v, events %v; want tok1 Succeeded again, from the record", patches, events)
	}
}

// Answers of another pod or attempt start nothing.
func TestMigrateIgnoresOtherAnswers(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
	}{
		{"a target prepared for another source", map[string]string{kubeapi.AnnotationMigrationTarget: js(t, targetAnswer("default/vm0", "tok1"))}},
		{"a target without a token", map[string]string{kubeapi.AnnotationMigrationTarget: js(t, targetAnswer(sourceKey, ""))}},
		{"a target not JSON", map[string]string{kubeapi.AnnotationMigrationTarget: "tok1"}},
		{"a result for the token already", map[string]string{kubeapi.AnnotationMigrationResult: js(t, kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationFailed})}},
		{"a target pod", map[string]string{kubeapi.AnnotationMigrateFrom: "default/vm0"}},
		{"no migrate-to", map[string]string{kubeapi.AnnotationMigrateTo: "", kubeapi.AnnotationPowerState: "Running"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sourceWithTarget(t, tt.extra)
			for range 3 {
				h.pass()
			}
			h.rec.running.Wait()
			if got := slices.DeleteFunc(h.vms.actions(), func(c string) bool { return c == "GetMigrationSource" }); len(got) > 0 {
				t.Errorf("calls = %q, want no Migrate", got)
			}
		})
	}
}

// migrateScript is a Migrate the test drives: each batch received is
// sent as progress, then acknowledged; closing batches ends it with end.
func migrateScript(batches chan []*vmv1.MigrateProgress, acked chan struct{}, end error) func(context.Context, func(*vmv1.MigrateProgress) error) error {
	return func(_ context.Context, send func(*vmv1.MigrateProgress) error) error {
		for batch := range batches {
			for _, m := range batch {
				_ = send(m)
			}
			acked <- struct{}{}
		}
		return end
	}
}

func TestMigrateProgressThrottled(t *testing.T) {
	h := sourceWithTarget(t, nil)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	h.rec.now = func() time.Time { return time.Unix(0, clock.Load()) }
	nudges := h.nudges()
	batches, acked := make(chan []*vmv1.MigrateProgress), make(chan struct{})
	h.vms.mig.run = migrateScript(batches, acked, nil)
	pass := func(batch ...*vmv1.MigrateProgress) (nudged int, progress []string) {
		t.Helper()
		batches <- batch
		<-acked
		nudged = len(nudges)
		for range nudged {
			<-nudges
		}
		_, patches, _ := h.pass()
		for _, p := range patches {
			if v := p[kubeapi.AnnotationMigrationProgress]; v != nil {
				progress = append(progress, *v)
			}
		}
		return nudged, progress
	}
	iteration := func(i uint64) *vmv1.MigrateProgress {
		return &vmv1.MigrateProgress{ElapsedMs: int64(i) * 500, DataTotalBytes: 1 << 30, DataProcessedBytes: i << 20, Iteration: i}
	}
	written := func(i uint64) []string {
		return []string{js(t, kubeapi.MigrationProgress{Token: "tok1", ElapsedMS: int64(i) * 500, TotalBytes: 1 << 30, ProcessedBytes: i << 20, Iteration: i})}
	}

	h.pass() // starts Migrate
	if n, got := pass(iteration(1), iteration(2), iteration(3)); n != 1 || !slices.Equal(got, written(3)) {
		t.Errorf("three reports at once: %d passes asked, progress written %q; want one, the last report", n, got)
	}
	clock.Add(int64(progressEvery - time.Millisecond))
	if n, got := pass(iteration(4)); n != 0 || len(got) > 0 {
		t.Errorf("a report within %s: %d passes asked, progress written %q; want none", progressEvery, n, got)
	}
	clock.Add(int64(time.Millisecond))
	if n, got := pass(iteration(5)); n != 1 || !slices.Equal(got, written(5)) {
		t.Errorf("a report %s later: %d passes asked, progress written %q; want iteration 5", progressEvery, n, got)
	}
	close(batches)
	awaitNudge(t, nudges)
	h.rec.running.Wait()
	h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Phase != kubeapi.MigrationSucceeded {
		t.Errorf("migration-result = %+v, want Succeeded", res)
	}
}

func TestMigrateFailed(t *testing.T) {
	h := sourceWithTarget(t, nil)
	nudges := h.nudges()
	h.vms.mig.run = func(context.Context, func(*vmv1.MigrateProgress) error) error {
		return errors.New("migrate vm1: libvirt: operation aborted: migration job: canceled by client")
	}
	h.pass()
	awaitNudge(t, nudges)
	h.rec.running.Wait()
	again, _, events := h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Token != "tok1" || res.Phase != kubeapi.MigrationFailed ||
		!strings.Contains(res.Message, "canceled by client") {
		t.Errorf("migration-result = %+v, want tok1 Failed with Migrate's error", res)
	}
	if len(events) != 1 || events[0].reason != ReasonMigrationFailed || events[0].eventType != corev1.EventTypeWarning {
		t.Errorf("events = %+v, want Warning kubeapi.MigrationFailed", events)
	}
	if again {
		t.Error("again: the VM runs on here, nothing to wait for")
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests[migrateKind].Phase != phaseFailed {
		t.Errorf("record = %+v, want tok1 failed", rec)
	}
	h.restart()
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"Migrate tok1"}) {
		t.Errorf("calls = %q: a failed token is not migrated again", got)
	}
}

// A restarted crimux finds Migrate started with no outcome: the
// migration ended with the crimux that ran it; where the VM is tells how.
func TestMigrateInterruptedByARestart(t *testing.T) {
	tests := []struct {
		state vmv1.PowerState
		want  kubeapi.MigrationResult
	}{
		{running, kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationFailed, Message: interruptedRunning}},
		{vmv1.PowerState_POWER_STATE_UNSPECIFIED, kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded, Message: interruptedGone}},
	}
	for _, tt := range tests {
		t.Run(powerStateName(tt.state), func(t *testing.T) {
			h := sourceWithTarget(t, nil)
			rec := record{UID: h.pod.UID, Requests: map[string]requestState{migrateKind: {Value: "tok1", Phase: phaseStarted}}}
			if err := h.rec.records.save(rec); err != nil {
				t.Fatal(err)
			}
			h.vms.state = tt.state
			h.pass()
			var res kubeapi.MigrationResult
			if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res != tt.want {
				t.Errorf("migration-result = %+v, want %+v", res, tt.want)
			}
			if got := h.vms.actions(); len(got) > 0 {
				t.Errorf("calls = %q: not migrated again", got)
			}
			if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests[migrateKind].Phase == phaseStarted {
				t.Errorf("record = %+v, want its outcome", rec)
			}
		})
	}
}

// Stopping crimux cancels Migrate (the VM API aborts it) and writes
// nothing: it stays started, for the next crimux to report.
func TestMigrateStoppedWithTheAgent(t *testing.T) {
	h := sourceWithTarget(t, nil)
	h.nudges()
	h.vms.mig.run = func(ctx context.Context, _ func(*vmv1.MigrateProgress) error) error {
		<-ctx.Done()
		return fmt.Errorf("migration aborted: %w", ctx.Err())
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := h.rec.reconcile(ctx, h.pod); err != nil {
		t.Fatal(err)
	}
	h.kube.take()
	cancel()
	h.rec.running.Wait()
	if _, err := h.rec.reconcile(ctx, h.pod); !errors.Is(err, context.Canceled) {
		t.Errorf("reconcile while stopping = %v, want context.Canceled", err)
	}
	if patches, _ := h.kube.take(); len(patches) > 0 {
		t.Errorf("patched %v while stopping", patches)
	}
	h.restart()
	h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Phase != kubeapi.MigrationFailed || res.Message != interruptedRunning {
		t.Errorf("after the restart: migration-result = %+v, want Failed, %q", res, interruptedRunning)
	}
}

// A container pod asked to move is told it cannot.
func TestMigrateNotAVM(t *testing.T) {
	h := newSource(t, nil)
	h.vms.getErr = fmt.Errorf("pod default/vm1 is a container pod: %w", errdefs.ErrFailedPrecondition)
	_, _, events := h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Phase != kubeapi.MigrationFailed || res.Token != "" ||
		!strings.Contains(res.Message, "container pod") {
		t.Errorf("migration-result = %+v, want Failed: not a VM", res)
	}
	if !slices.Equal(reasons(events), []string{ReasonNotAVM}) {
		t.Errorf("events = %+v, want NotAVM", events)
	}
}
