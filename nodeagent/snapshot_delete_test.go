package nodeagent

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// withSnapshots gives the harness's VM snapshots of these names, oldest
// first.
func (h *harness) withSnapshots(names ...string) {
	for i, n := range names {
		h.vms.snapshots = append(h.vms.snapshots, &vmv1.Snapshot{Name: n, CreatedAt: int64(1796000000 + i)})
	}
}

// TestSnapshotDeleteDoneOncePerValue: a snapshot-delete-request deletes
// its snapshot once, through passes and a restart, reports "<name>:
// deleted" with a Normal SnapshotDeleted event, and a new name is a new
// request.
func TestSnapshotDeleteDoneOncePerValue(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotDeleteRequest: "s1"})
	h.withSnapshots("s1", "s2")
	_, _, events := h.pass()
	h.pass()
	h.restart()
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"DeleteSnapshot s1"}) {
		t.Fatalf("calls over three passes and a restart = %q, want DeleteSnapshot s1 once", got)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationSnapshotDeleteResult]; got != "s1: deleted" {
		t.Errorf("snapshot-delete-result = %q, want s1: deleted", got)
	}
	want := event{corev1.EventTypeNormal, ReasonSnapshotDeleted, kubeapi.AnnotationSnapshotDeleteRequest + " s1: deleted"}
	if !slices.Equal(events, []event{want}) {
		t.Errorf("events = %+v, want %+v", events, want)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["snapshot-delete"].Phase != phaseDone {
		t.Errorf("record = %+v, want snapshot-delete s1 done", rec)
	}

	h.annotate(kubeapi.AnnotationSnapshotDeleteRequest, ptr("s2"))
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"DeleteSnapshot s1", "DeleteSnapshot s2"}) {
		t.Errorf("calls = %q, want s2 deleted too", got)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationSnapshotDeleteResult]; got != "s2: deleted" {
		t.Errorf("snapshot-delete-result = %q, want s2: deleted", got)
	}
}

// TestSnapshotDeleteFailedNotRetried: deleting a snapshot the VM does not
// have fails with the VM API's reason and a Warning SnapshotDeleteFailed,
// and is not tried again.
func TestSnapshotDeleteFailedNotRetried(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotDeleteRequest: "nope"})
	_, _, events := h.pass()
	got := h.pod.Annotations[kubeapi.AnnotationSnapshotDeleteResult]
	if !strings.HasPrefix(got, "nope: failed: ") || !strings.Contains(got, "no snapshot of that name") {
		t.Errorf("snapshot-delete-result = %q, want nope: failed: <the VM API's reason>", got)
	}
	if len(events) != 1 || events[0].eventType != corev1.EventTypeWarning || events[0].reason != ReasonSnapshotDeleteFailed {
		t.Errorf("events = %+v, want one Warning SnapshotDeleteFailed", events)
	}
	h.withSnapshots("nope")
	h.pass()
	if got := h.vms.actions(); len(got) != 1 {
		t.Errorf("calls = %q: a failed value is not retried", got)
	}
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["snapshot-delete"].Phase != phaseFailed {
		t.Errorf("record = %+v, want snapshot-delete nope failed", rec)
	}
}

// TestSnapshotDeleteStartedIsNotRedone: the VM API's DeleteSnapshot
// announces itself once its checks pass, and the agent records the value
// started then, so crimux dying in the call does not delete again after
// its restart.
func TestSnapshotDeleteStartedIsNotRedone(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotDeleteRequest: "s1"})
	h.withSnapshots("s1")
	h.vms.during = func() { panic("crimux dies mid-delete") }
	func() {
		defer func() { _ = recover() }()
		h.rec.reconcile(context.Background(), h.pod)
	}()
	if rec, _ := h.rec.records.load(h.pod.UID); rec.Requests["snapshot-delete"].Phase != phaseStarted {
		t.Fatalf("record after the crash = %+v, want snapshot-delete s1 started", rec)
	}
	h.vms.during = nil
	h.vms.reset()
	h.restart()
	_, _, events := h.pass()
	if got := h.vms.actions(); len(got) > 0 {
		t.Errorf("after the restart: calls %q; a started value is not redone", got)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationSnapshotDeleteResult]; got != "s1: "+interruptedOutcome {
		t.Errorf("snapshot-delete-result = %q, want s1: %s", got, interruptedOutcome)
	}
	if !slices.Equal(reasons(events), []string{ReasonSnapshotDeleted}) {
		t.Errorf("events = %+v, want SnapshotDeleted", events)
	}
}

// TestSnapshotDeleteOrder: delete comes after restore (go back to a
// snapshot and drop it) and before snapshot (room under the cap for the
// new one), as requestKinds argues.
func TestSnapshotDeleteOrder(t *testing.T) {
	h := newHarness(t, running, map[string]string{
		kubeapi.AnnotationRebootRequest: "t1", kubeapi.AnnotationSnapshotRequest: "s3",
		kubeapi.AnnotationSnapshotDeleteRequest: "s1", kubeapi.AnnotationRestoreRequest: "s1",
	})
	h.withSnapshots("s1", "s2")
	_, _, events := h.pass()
	want := []string{"RestoreSnapshot s1", "DeleteSnapshot s1", "CreateSnapshot s3", "RebootVM"}
	if got := h.vms.actions(); !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	wantReasons := []string{ReasonSnapshotRestored, ReasonSnapshotDeleted, ReasonSnapshotCreated, ReasonRebooted}
	if got := reasons(events); !slices.Equal(got, wantReasons) {
		t.Errorf("events = %q, want %q", got, wantReasons)
	}
}
