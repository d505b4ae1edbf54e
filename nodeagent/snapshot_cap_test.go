package nodeagent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/kubeapi"
)

// TestSnapshotPastTheCapReported: a snapshot-request refused
// because the VM has its cap of snapshots (ResourceExhausted, before the
// VM API acts) is reported on the pod: its result says failed with the
// cap, a Warning SnapshotFailed event says so, and the value is recorded
// failed, not retried; the next name, once a snapshot was deleted, is
// taken up.
func TestSnapshotPastTheCapReported(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotRequest: "s9"})
	h.vms.refuse = fmt.Errorf("vm %q: the VM has 8 snapshots, its cap (libvirt.max_snapshots_per_vm = 8): delete one first: %w",
		"default/vm1", errdefs.ErrResourceExhausted)
	_, _, events := h.pass()
	got := h.pod.Annotations[kubeapi.AnnotationSnapshotResult]
	if !strings.HasPrefix(got, "s9: failed: ") || !strings.Contains(got, "libvirt.max_snapshots_per_vm = 8") || !strings.Contains(got, "resource exhausted") {
		t.Fatalf("snapshot-result = %q, want s9: failed: naming the cap", got)
	}
	if len(events) != 1 || events[0].eventType != corev1.EventTypeWarning || events[0].reason != ReasonSnapshotFailed ||
		!strings.Contains(events[0].message, "max_snapshots_per_vm") {
		t.Fatalf("events = %+v, want one Warning SnapshotFailed naming the cap", events)
	}
	if rec, err := h.rec.records.load(h.pod.UID); err != nil || rec.Requests["snapshot"].Phase != phaseFailed {
		t.Fatalf("record = %+v, %v; want s9 failed (never started)", rec, err)
	}

	h.vms.refuse = nil
	h.pass()
	if got := h.vms.actions(); len(got) != 1 {
		t.Fatalf("calls = %q: a refused value is not taken up again", got)
	}
	h.annotate(kubeapi.AnnotationSnapshotRequest, ptr("s10"))
	h.pass()
	if got := h.vms.actions(); !slices.Equal(got, []string{"CreateSnapshot s9", "CreateSnapshot s10"}) {
		t.Fatalf("calls = %q, want s9 then the new name s10", got)
	}
	if got := h.pod.Annotations[kubeapi.AnnotationSnapshotResult]; got != "s10: created" {
		t.Fatalf("snapshot-result = %q, want s10: created", got)
	}
}
