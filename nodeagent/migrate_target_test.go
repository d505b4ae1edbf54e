package nodeagent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// copiedSource is S's migration-source as the plugin copies it to T.
func copiedSource(t *testing.T, target string) string {
	return js(t, kubeapi.MigrationSource{Target: target, DomainXML: fakeSource.DomainXml, GuestMAC: fakeSource.GuestMac,
		ImageDigest: fakeSource.ImageDigest})
}

func TestPrepareOnce(t *testing.T) {
	prepared := targetAnswer(sourceKey, "tok1")
	notWaiting := fmt.Errorf("container c1 (CONTAINER_EXITED) is not waiting for a migrating VM: %w", errdefs.ErrFailedPrecondition)
	tests := []struct {
		name       string
		extra      map[string]string
		state      vmv1.PowerState
		container  string
		prepareErr error
		wantCalls  []string
		want       *kubeapi.MigrationTarget // nil: none
		wantFailed string                   // in a migration-result without a token; "": none
		wantEvent  string
		wantAgain  bool
	}{
		{name: "prepared", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)},
			wantCalls: []string{"PrepareMigration"}, want: &prepared, wantEvent: ReasonMigrationPrepared},
		{name: "no source copied yet"},
		{name: "a source described for another target", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, "vm1-other")}},
		{name: "a migration-target for another source is not this one's",
			extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName),
				kubeapi.AnnotationMigrationTarget: js(t, targetAnswer("default/vm0", "tok0"))},
			wantCalls: []string{"PrepareMigration"}, want: &prepared, wantEvent: ReasonMigrationPrepared},
		{name: "prepared already", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName),
			kubeapi.AnnotationMigrationTarget: js(t, prepared)}, want: &prepared},
		{name: "refused", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)},
			prepareErr: errdefs.Invalid("source.image_digest", "the images differ"),
			wantCalls:  []string{"PrepareMigration"}, wantFailed: "the images differ", wantEvent: ReasonMigrationFailed},
		{name: "refused already", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName),
			kubeapi.AnnotationMigrationResult: js(t, kubeapi.MigrationResult{Phase: kubeapi.MigrationFailed, Message: "PrepareMigration: no"})},
			wantFailed: "PrepareMigration: no"},
		{name: "its container not started yet", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)},
			state: vmv1.PowerState_POWER_STATE_UNSPECIFIED, container: "CONTAINER_CREATED", wantAgain: true},
		{name: "its container exited", extra: map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)},
			state: vmv1.PowerState_POWER_STATE_UNSPECIFIED, container: containerExited, prepareErr: notWaiting,
			wantCalls: []string{"PrepareMigration"}, wantFailed: "is not waiting", wantEvent: ReasonMigrationFailed, wantAgain: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTarget(t, tt.extra)
			if tt.container != "" {
				h.vms.state, h.vms.container = tt.state, tt.container
			}
			h.vms.mig.prepareErr = tt.prepareErr
			again, _, events := h.pass()
			for range 3 {
				h.pass()
			}
			if got := h.vms.actions(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls over four passes = %q, want %q", got, tt.wantCalls)
			}
			if again != tt.wantAgain {
				t.Errorf("again = %v, want %v", again, tt.wantAgain)
			}
			var tgt kubeapi.MigrationTarget
			if ok := h.decoded(kubeapi.AnnotationMigrationTarget, &tgt); ok != (tt.want != nil) || ok && !equalJSON(t, tgt, *tt.want) {
				t.Errorf("migration-target = %+v (present %v), want %+v", tgt, ok, tt.want)
			}
			var res kubeapi.MigrationResult
			ok := h.decoded(kubeapi.AnnotationMigrationResult, &res)
			if ok != (tt.wantFailed != "") || ok && (res.Phase != kubeapi.MigrationFailed || res.Token != "" || !strings.Contains(res.Message, tt.wantFailed)) {
				t.Errorf("migration-result = %+v (present %v), want Failed, no token, saying %q", res, ok, tt.wantFailed)
			}
			if got := reasons(events); tt.wantEvent != "" && !slices.Equal(got, []string{tt.wantEvent}) || tt.wantEvent == "" && len(got) > 0 {
				t.Errorf("events = %q, want %q", got, tt.wantEvent)
			}
			if tt.wantCalls != nil {
				if req := h.vms.mig.prepared; req.GetSource().GetDomainXml() != fakeSource.DomainXml || req.GetVm().GetPod().GetName() != targetName {
					t.Errorf("PrepareMigration request = %v, want S's source for T", req)
				}
			}
		})
	}
}

// A patch lost (the API server away) does not prepare again: the retry
// writes the answer kept in memory, and announces it.
func TestPrepareNotRepeatedAfterALostPatch(t *testing.T) {
	h := newTarget(t, map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)})
	h.kube.patchErr = errors.New("connection refused")
	if _, err := h.rec.reconcile(t.Context(), h.pod); err == nil {
		t.Fatal("reconcile with a failing patch succeeded; want the error, to retry")
	}
	h.kube.patchErr = nil
	_, patches, events := h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"PrepareMigration"}) {
		t.Errorf("calls = %q, want PrepareMigration once", got)
	}
	if len(patches) != 1 || patches[0][kubeapi.AnnotationMigrationTarget] == nil || !slices.Equal(reasons(events), []string{ReasonMigrationPrepared}) {
		t.Errorf("the retry: patches %v, events %v; want the migration-target, announced", patches, events)
	}
}

// T's VM not there yet: retried with backoff, prepared once it is.
func TestPrepareWaitsForTheVM(t *testing.T) {
	h := newTarget(t, map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)})
	h.vms.getErr = notFound("no sandbox")
	if again, _, _ := h.pass(); !again || len(h.vms.actions()) > 0 {
		t.Fatalf("again %v, calls %q; want a retry and no call", again, h.vms.actions())
	}
	h.vms.getErr = nil
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"PrepareMigration"}) {
		t.Errorf("calls = %q, want PrepareMigration", got)
	}
}

// A waiting target reports Running (its container runs, with no qemu):
// its power state and requests wait until its VM has arrived, then the
// next pass applies them.
func TestTargetHoldsItsRequests(t *testing.T) {
	h := newTarget(t, map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName),
		kubeapi.AnnotationPowerState: "Paused", kubeapi.AnnotationRebootRequest: "r1"})
	h.pass()
	h.annotate(kubeapi.AnnotationMigrationResult, ptr(js(t, kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded})))
	h.pass()
	if got, want := h.vms.actions(), []string{"PrepareMigration", "FinishMigration"}; !slices.Equal(got, want) {
		t.Fatalf("calls while arriving = %q, want %q", got, want)
	}
	if _, ok := h.pod.Annotations[kubeapi.AnnotationObservedPowerState]; ok {
		t.Errorf("observed-power-state written while the VM was arriving: %v", h.pod.Annotations)
	}
	h.vms.reset()
	h.pass()
	if got, want := h.vms.actions(), []string{"SetPowerState Paused", "RebootVM"}; !slices.Equal(got, want) {
		t.Errorf("calls once arrived = %q, want %q", got, want)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationObservedPowerState]; got != "Paused" {
		t.Errorf("observed-power-state = %q, want Paused", got)
	}
}

func TestFinish(t *testing.T) {
	arrived := kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationSucceeded, DowntimeMS: 84, Addresses: []string{"10.0.0.7"}}
	failedCall := "FinishMigration failed: the source failed to send it: aborted"
	tests := []struct {
		name          string
		result        kubeapi.MigrationResult
		extra         map[string]string
		finishErr     error
		arrivesAnyway bool
		wantCalls     []string
		want          *kubeapi.MigrationFinish // nil: none
		wantIn        string                   // in its message or note
		wantEvent     string
	}{
		{name: "arrived", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded},
			wantCalls: []string{"FinishMigration"}, want: &arrived, wantEvent: ReasonMigrationArrived},
		{name: "the source failed", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationFailed, Message: "aborted"},
			wantCalls: []string{failedCall},
			want:      &kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationFailed, Message: "the source failed to send it: aborted"},
			wantEvent: ReasonMigrationFailed},
		{name: "the source failed, but the VM arrived", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationFailed, Message: "aborted"},
			arrivesAnyway: true, wantCalls: []string{failedCall},
			want: &kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationSucceeded, DowntimeMS: 84, Addresses: []string{"10.0.0.7"},
				Note: "the source reported the migration failed, but the VM arrived here"},
			wantEvent: ReasonMigrationArrived},
		{name: "FinishMigration fails", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded},
			finishErr: errors.New("the VM did not arrive"), wantCalls: []string{"FinishMigration"},
			want:      &kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationFailed, Message: "FinishMigration: the VM did not arrive"},
			wantEvent: ReasonMigrationFailed},
		{name: "a result for another token", result: kubeapi.MigrationResult{Token: "tok0", Phase: kubeapi.MigrationSucceeded}},
		{name: "finished already", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded},
			extra: map[string]string{kubeapi.AnnotationMigrationFinish: js(t, kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationFailed})},
			want:  &kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationFailed}},
		{name: "an earlier attempt's finish is not this one's", result: kubeapi.MigrationResult{Token: "tok1", Phase: kubeapi.MigrationSucceeded},
			extra:     map[string]string{kubeapi.AnnotationMigrationFinish: js(t, kubeapi.MigrationFinish{Token: "tok0", Phase: kubeapi.MigrationFailed})},
			wantCalls: []string{"FinishMigration"}, want: &arrived, wantEvent: ReasonMigrationArrived},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := map[string]string{
				kubeapi.AnnotationMigrationSource: copiedSource(t, targetName),
				kubeapi.AnnotationMigrationTarget: js(t, targetAnswer(sourceKey, "tok1")),
				kubeapi.AnnotationMigrationResult: js(t, tt.result),
			}
			for k, v := range tt.extra {
				a[k] = v
			}
			h := newTarget(t, a)
			h.vms.mig.finishErr, h.vms.mig.arrivesAnyway = tt.finishErr, tt.arrivesAnyway
			_, _, events := h.pass()
			for range 3 {
				h.pass()
			}
			if got := h.vms.actions(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls over four passes = %q, want %q", got, tt.wantCalls)
			}
			var fin kubeapi.MigrationFinish
			if ok := h.decoded(kubeapi.AnnotationMigrationFinish, &fin); ok != (tt.want != nil) || ok && !equalJSON(t, fin, *tt.want) {
				t.Errorf("migration-finish = %+v (present %v), want %+v", fin, ok, tt.want)
			}
			got := reasons(events)
			if tt.wantEvent != "" && !slices.Equal(got, []string{tt.wantEvent}) || tt.wantEvent == "" && len(got) > 0 {
				t.Errorf("events = %q, want %q", got, tt.wantEvent)
			}
			if len(events) == 1 && tt.wantEvent == ReasonMigrationFailed && events[0].eventType != corev1.EventTypeWarning {
				t.Errorf("event %+v, want a Warning", events[0])
			}
		})
	}
}

// A container pod made a target is told it cannot be one.
func TestPrepareNotAVM(t *testing.T) {
	h := newTarget(t, map[string]string{kubeapi.AnnotationMigrationSource: copiedSource(t, targetName)})
	h.vms.getErr = fmt.Errorf("pod default/vm1-moved is a container pod: %w", errdefs.ErrFailedPrecondition)
	h.pass()
	var res kubeapi.MigrationResult
	if !h.decoded(kubeapi.AnnotationMigrationResult, &res) || res.Phase != kubeapi.MigrationFailed || res.Token != "" {
		t.Errorf("migration-result = %+v, want Failed without a token", res)
	}
}

// What holds a target's power state: until the agents' finish says its
// VM arrived, or, moved without them (crimuxctl vm migrate), until its
// domain runs.
func TestTargetHeldUntilArrived(t *testing.T) {
	prepared := js(t, targetAnswer(sourceKey, "tok1"))
	tests := []struct {
		name   string
		extra  map[string]string
		domain string
		held   bool
	}{
		{"waiting, its own domain shut off", nil, "shutoff", true},
		{"prepared (crimuxctl), its domain undefined", nil, "undefined", true},
		{"the VM coming in (crimuxctl)", nil, "paused", true},
		{"arrived (crimuxctl)", nil, "running", false},
		{"the agents' migration, switched over, not finished", map[string]string{kubeapi.AnnotationMigrationTarget: prepared}, "running", true},
		{"the agents' migration, finished", map[string]string{kubeapi.AnnotationMigrationTarget: prepared,
			kubeapi.AnnotationMigrationFinish: js(t, kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationSucceeded})}, "running", false},
		{"the agents' migration, failed", map[string]string{kubeapi.AnnotationMigrationTarget: prepared,
			kubeapi.AnnotationMigrationFinish: js(t, kubeapi.MigrationFinish{Token: "tok1", Phase: kubeapi.MigrationFailed})}, "shutoff", true},
		{"an earlier attempt's finish", map[string]string{kubeapi.AnnotationMigrationTarget: prepared,
			kubeapi.AnnotationMigrationFinish: js(t, kubeapi.MigrationFinish{Token: "tok0", Phase: kubeapi.MigrationSucceeded})}, "running", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := map[string]string{kubeapi.AnnotationPowerState: "Paused"}
			for k, v := range tt.extra {
				extra[k] = v
			}
			h := newTarget(t, extra)
			h.vms.domain = tt.domain
			h.pass()
			calls := h.vms.actions()
			_, observed := h.pod.Annotations[kubeapi.AnnotationObservedPowerState]
			if held := len(calls) == 0 && !observed; held != tt.held {
				t.Errorf("calls %q, observed-power-state written %v; want held %v", calls, observed, tt.held)
			}
		})
	}
}
