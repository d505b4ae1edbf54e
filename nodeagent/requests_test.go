package nodeagent

import (
	"context"
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

func TestRequestDoneOncePerValue(t *testing.T) {
	tests := []struct {
		request, result string
		call            string // the call, %s the value
		outcome         string // the result, %s the value
		reason          string
	}{
		{kubeapi.AnnotationRebootRequest, kubeapi.AnnotationRebootResult, "RebootVM", "%s: rebooted (soft)", ReasonRebooted},
		{kubeapi.AnnotationSnapshotRequest, kubeapi.AnnotationSnapshotResult, "CreateSnapshot %s", "%s: created", ReasonSnapshotCreated},
		{kubeapi.AnnotationRestoreRequest, kubeapi.AnnotationRestoreResult, "RestoreSnapshot %s", "%s: restored (Running)", ReasonSnapshotRestored},
	}
	for _, tt := range tests {
		t.Run(tt.request, func(t *testing.T) {
			h := newHarness(t, running, map[string]string{tt.request: "v1"})
			call := func(v string) string { return strings.ReplaceAll(tt.call, "%s", v) }
			h.pass()
			h.pass()
			h.restart()
			h.pass() // a restart does not redo it either
			if got := h.vms.actions(); !slices.Equal(got, []string{call("v1")}) {
				t.Fatalf("calls over three passes and a restart = %q, want %q once", got, call("v1"))
			}
			if got, want := h.pod.Annotations[tt.result], fmt.Sprintf(tt.outcome, "v1"); got != want {
				t.Errorf("%s = %q, want %q", tt.result, got, want)
			}

			h.vms.reset()
			h.annotate(tt.request, ptr("v2"))
			_, patches, events := h.pass()
			if got := h.vms.actions(); !slices.Equal(got, []string{call("v2")}) {
				t.Errorf("a new value: calls %q, want %q", got, call("v2"))
			}
			want := fmt.Sprintf(tt.outcome, "v2")
			if len(patches) != 1 || *patches[0][tt.result] != want {
				t.Errorf("patches = %v, want %s = %q", patches, tt.result, want)
			}
			if len(events) != 1 || events[0].reason != tt.reason || events[0].eventType != corev1.EventTypeNormal ||
				events[0].message != tt.request+" "+want {
				t.Errorf("events = %+v, want Normal %s %q", events, tt.reason, tt.request+" "+want)
			}
		})
	}
}

func TestRequestFailedNotRetried(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotRequest: "s1"})
	h.vms.snapshotErr = fmt.Errorf("vm %q: snapshot %q: %w", "default/vm1", "s1", errdefs.ErrAlreadyExists)
	_, _, events := h.pass()
	got := h.pod.Annotations[kubeapi.AnnotationSnapshotResult]
	if !strings.HasPrefix(got, "s1: failed: ") || !strings.Contains(got, "already exists") {
		t.Errorf("snapshot-result = %q, want s1: failed: <the VM API's message>", got)
	}
	if len(events) != 1 || events[0].reason != ReasonSnapshotFailed || events[0].eventType != corev1.EventTypeWarning {
		t.Errorf("events = %+v, want one Warning SnapshotFailed", events)
	}
	h.vms.snapshotErr = nil
	h.pass()
	if got := h.vms.actions(); len(got) != 1 {
		t.Errorf("calls = %q: a failed value is not retried (a new name is a new request)", got)
	}
	rec, err := h.rec.records.load(h.pod.UID)
	if err != nil || rec.Requests["snapshot"].Phase != phaseFailed {
		t.Errorf("record = %+v, %v; want snapshot failed", rec, err)
	}
}

func TestRebootOutcomes(t *testing.T) {
	tests := []struct {
		resp *vmv1.RebootVMResponse
		want string
	}{
		{&vmv1.RebootVMResponse{Method: vmv1.RebootMethod_REBOOT_METHOD_SOFT}, "t: rebooted (soft)"},
		{&vmv1.RebootVMResponse{Method: vmv1.RebootMethod_REBOOT_METHOD_HARD}, "t: rebooted (hard)"},
		{&vmv1.RebootVMResponse{Method: vmv1.RebootMethod_REBOOT_METHOD_HARD, SoftTimedOut: true},
			"t: rebooted (hard: the guest did not restart within the soft reboot's deadline)"},
	}
	for _, tt := range tests {
		h := newHarness(t, running, map[string]string{kubeapi.AnnotationRebootRequest: "t"})
		h.vms.reboot = tt.resp
		h.pass()
		if got := h.pod.Annotations[kubeapi.AnnotationRebootResult]; got != tt.want {
			t.Errorf("%v: reboot-result = %q, want %q", tt.resp, got, tt.want)
		}
	}
}

// crimux died after recording a value started: after the restart it is
// not done again, but reported done, saying so.
func TestStartedRecordNotRedoneAfterRestart(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationRebootRequest: "r1"})
	h.vms.during = func() { panic("crimux dies mid-reboot") }
	func() {
		defer func() { _ = recover() }()
		h.rec.reconcile(context.Background(), h.pod)
	}()
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["reboot"].Phase != phaseStarted {
		t.Fatalf("record after the crash = %+v, want reboot r1 started", rec)
	}

	h.vms.during = nil
	h.vms.reset()
	h.restart()
	_, _, events := h.pass()
	if got := h.vms.actions(); len(got) > 0 {
		t.Fatalf("after the restart: calls %q; a started value is not redone", got)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationRebootResult]; got != "r1: "+interruptedOutcome {
		t.Errorf("reboot-result = %q, want r1: %s", got, interruptedOutcome)
	}
	if len(events) != 1 || events[0].reason != ReasonRebooted {
		t.Errorf("events = %+v, want Rebooted", events)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["reboot"].Phase != phaseDone {
		t.Errorf("record = %+v, want reboot r1 done", rec)
	}
}

// Stopping crimux (its context ends) mid-action leaves the value started:
// the next crimux reports it and does not redo it.
func TestStoppingLeavesTheValueStarted(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotRequest: "s1"})
	ctx, cancel := context.WithCancel(context.Background())
	h.vms.during = cancel
	if _, err := h.rec.reconcile(ctx, h.pod); !errors.Is(err, context.Canceled) {
		t.Fatalf("reconcile = %v, want context.Canceled", err)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["snapshot"] != (requestState{Value: "s1", Phase: phaseStarted, At: h.rec.now()}) {
		t.Errorf("record = %+v, want s1 started", rec)
	}
	if p, _ := h.kube.take(); len(p) > 0 {
		t.Errorf("patched %v while stopping", p)
	}
}

// A value already done is reported again only if the pod has no result
// for it (a patch lost to an API server outage, or the result removed).
func TestDoneValueReReportedOnlyWithoutResult(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotRequest: "s1"})
	h.kube.patchErr = errors.New("connection refused")
	if _, err := h.rec.reconcile(context.Background(), h.pod); err == nil {
		t.Fatal("reconcile with a failing patch succeeded; want the error, to retry")
	}
	if _, events := h.kube.take(); len(events) > 0 {
		t.Errorf("events %v announced though the patch failed", events)
	}

	h.kube.patchErr = nil
	_, patches, events := h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"CreateSnapshot s1"}) {
		t.Errorf("calls = %q, want the snapshot once", got)
	}
	if len(patches) != 1 || *patches[0][kubeapi.AnnotationSnapshotResult] != "s1: created" || !slices.Equal(reasons(events), []string{ReasonSnapshotCreated}) {
		t.Errorf("the retry: patches %v, events %v; want s1: created reported and announced", patches, events)
	}

	h.annotate(kubeapi.AnnotationSnapshotResult, ptr("s1: created (seen by the user)"))
	if _, patches, _ := h.pass(); len(patches) > 0 {
		t.Errorf("patches = %v: a result for the value is there already", patches)
	}
	h.annotate(kubeapi.AnnotationSnapshotResult, nil)
	if _, patches, _ := h.pass(); len(patches) != 1 || *patches[0][kubeapi.AnnotationSnapshotResult] != "s1: created" {
		t.Errorf("patches = %v, want the result again once removed", patches)
	}
}

// The informer may show the pod without the agent's last patch (an
// update queued before it): the agent does not write, or announce, it
// twice.
func TestResultNotRePatchedFromAStalePod(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationRebootRequest: "t1", kubeapi.AnnotationPowerState: "Running"})
	stale := h.pod
	h.pass()
	if _, err := h.rec.reconcile(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if patches, events := h.kube.take(); len(patches) > 0 || len(events) > 0 {
		t.Errorf("stale pod: patches %v, events %v; want none", patches, events)
	}
	if _, patches, _ := h.pass(); len(patches) > 0 {
		t.Errorf("pod with the patch: patches %v", patches)
	}
}

func TestOrderWithinAPass(t *testing.T) {
	h := newHarness(t, paused, map[string]string{
		kubeapi.AnnotationPowerState: "Running", kubeapi.AnnotationRebootRequest: "t1",
		kubeapi.AnnotationSnapshotRequest: "s2", kubeapi.AnnotationRestoreRequest: "s1",
	})
	_, patches, events := h.pass()
	want := []string{"SetPowerState Running", "RestoreSnapshot s1", "CreateSnapshot s2", "RebootVM"}
	if got := h.vms.actions(); !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if len(patches) != 1 {
		t.Errorf("patches = %v, want one for the whole pass", patches)
	}
	if got, want := reasons(events), []string{ReasonPowerStateChanged, ReasonSnapshotRestored, ReasonSnapshotCreated, ReasonRebooted}; !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// A restore returns the VM to its snapshot's state; the declared power
// state is applied by the next pass.
func TestRestoreThenDeclaredPowerState(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationPowerState: "Running", kubeapi.AnnotationRestoreRequest: "s1"})
	h.vms.restoreState = paused
	again, _, _ := h.pass()
	if !again || h.pod.Annotations[kubeapi.AnnotationRestoreResult] != "s1: restored (Paused)" || h.pod.Annotations[kubeapi.AnnotationObservedPowerState] != "Paused" {
		t.Fatalf("again %v, annotations %v; want another pass, s1 restored (Paused), Paused observed", again, h.pod.Annotations)
	}
	again, _, _ = h.pass()
	if got := h.vms.actions(); again || !slices.Equal(got, []string{"RestoreSnapshot s1", "SetPowerState Running"}) {
		t.Errorf("again %v, calls %q; want the restore, then Running", again, got)
	}
}

func TestEmptyRequestValueIsNoRequest(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationRebootRequest: ""})
	_, patches, _ := h.pass()
	if got := h.vms.actions(); len(got) > 0 {
		t.Errorf("calls = %q for an empty value", got)
	}
	if len(patches) != 1 || len(patches[0]) != 2 || patches[0][kubeapi.AnnotationObservedPowerState] == nil || patches[0][kubeapi.AnnotationSnapshots] == nil {
		t.Errorf("patches = %v, want observed-power-state and the snapshots (first sight) alone", patches)
	}
}

// The value is recorded started only once the VM API is about to act: a
// request refused by its checks is recorded failed, never started.
func TestStartedOnlyWhenAboutToAct(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationRebootRequest: "t1"})
	h.vms.refuse = errors.New("the VM is Paused: a reboot needs a running VM")
	h.pass()
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["reboot"].Phase != phaseFailed {
		t.Fatalf("record = %+v, want t1 failed (never started)", rec)
	}
}
