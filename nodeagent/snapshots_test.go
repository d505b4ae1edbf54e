package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// listed is the pod's crimux.io/snapshots, parsed; ok is false when the
// pod has none.
func (h *harness) listed() (entries []kubeapi.SnapshotEntry, ok bool) {
	h.t.Helper()
	ok, err := kubeapi.DecodeAnnotation(h.pod.Annotations, kubeapi.AnnotationSnapshots, &entries)
	if err != nil {
		h.t.Fatal(err)
	}
	return entries, ok
}

func names(entries []kubeapi.SnapshotEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

// TestSnapshotsListedOnFirstSight: the first pass over a pod lists the
// VM's snapshots there already (name, creation time, description), once;
// a restarted agent lists them again (they may have changed meanwhile),
// and so does a pass over a pod whose list was removed.
func TestSnapshotsListedOnFirstSight(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationPowerState: "Running"})
	h.vms.snapshots = []*vmv1.Snapshot{
		{Name: "base", CreatedAt: 1796126400, Description: "before <the> upgrade"},
		{Name: "later"},
	}
	h.pass()
	want := []kubeapi.SnapshotEntry{{Name: "base", Created: "2026-12-01T12:00:00Z", Description: "before <the> upgrade"}, {Name: "later"}}
	if got, _ := h.listed(); !slices.Equal(got, want) {
		t.Errorf("crimux.io/snapshots = %q, want %+v", h.pod.Annotations[kubeapi.AnnotationSnapshots], want)
	}
	if got, want := h.pod.Annotations[kubeapi.AnnotationSnapshots],
		`[{"name":"base","created":"2026-12-01T12:00:00Z","description":"before <the> upgrade"},{"name":"later"}]`; got != want {
		t.Errorf("crimux.io/snapshots = %s, want the compact %s", got, want)
	}
	if _, patches, _ := h.pass(); len(patches) > 0 || h.vms.count("ListSnapshots") != 1 {
		t.Errorf("second pass: patches %v, %d lists; want none, one list in all", patches, h.vms.count("ListSnapshots"))
	}

	h.vms.snapshots = h.vms.snapshots[:1] // deleted on the node while crimux was down
	h.restart()
	h.pass()
	if got, _ := h.listed(); !slices.Equal(names(got), []string{"base"}) || h.vms.count("ListSnapshots") != 2 {
		t.Errorf("after a restart: listed %q after %d lists; want base, listed again", names(got), h.vms.count("ListSnapshots"))
	}
	h.annotate(kubeapi.AnnotationSnapshots, nil)
	h.pass()
	if _, ok := h.listed(); !ok {
		t.Error("a list removed from the pod is not written again")
	}
}

// TestSnapshotsListedAfterEachChange: a snapshot created, restored or
// deleted lists them again; a failed request does not.
func TestSnapshotsListedAfterEachChange(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationSnapshotRequest: "s1"})
	h.pass()
	if got, _ := h.listed(); !slices.Equal(names(got), []string{"s1"}) {
		t.Fatalf("after s1 created: listed %q", names(got))
	}
	h.annotate(kubeapi.AnnotationSnapshotRequest, ptr("s2"))
	h.pass()
	if got, _ := h.listed(); !slices.Equal(names(got), []string{"s1", "s2"}) {
		t.Fatalf("after s2 created: listed %q", names(got))
	}
	if !strings.Contains(h.pod.Annotations[kubeapi.AnnotationSnapshots], `"description":"crimux.io/snapshot-request on pod default/vm1"`) {
		t.Errorf("crimux.io/snapshots = %s, want the agent's description", h.pod.Annotations[kubeapi.AnnotationSnapshots])
	}
	lists := h.vms.count("ListSnapshots")
	h.annotate(kubeapi.AnnotationRestoreRequest, ptr("s1"))
	h.pass()
	if h.vms.count("ListSnapshots") != lists+1 {
		t.Errorf("a restore did not list the snapshots again")
	}
	h.annotate(kubeapi.AnnotationSnapshotDeleteRequest, ptr("s1"))
	h.pass()
	if got, _ := h.listed(); !slices.Equal(names(got), []string{"s2"}) {
		t.Fatalf("after s1 deleted: listed %q", names(got))
	}
	lists = h.vms.count("ListSnapshots")
	h.annotate(kubeapi.AnnotationSnapshotDeleteRequest, ptr("gone"))
	h.pass()
	if h.vms.count("ListSnapshots") != lists {
		t.Errorf("a failed delete listed the snapshots again")
	}
}

// TestSnapshotsListFailureRetried: a list that fails writes nothing and
// is tried on the next pass.
func TestSnapshotsListFailureRetried(t *testing.T) {
	h := newHarness(t, running, map[string]string{kubeapi.AnnotationPowerState: "Running"})
	h.withSnapshots("s1")
	h.vms.listErr = errors.New("libvirt is restarting")
	h.pass()
	if _, ok := h.listed(); ok {
		t.Fatal("a failed list wrote crimux.io/snapshots")
	}
	h.vms.listErr = nil
	h.pass()
	if got, _ := h.listed(); !slices.Equal(names(got), []string{"s1"}) {
		t.Errorf("next pass: listed %q, want s1", names(got))
	}
}

// TestSnapshotsListBounded: at most kubeapi.MaxListedSnapshots entries,
// the newest; descriptions cut to kubeapi.MaxSnapshotDescription bytes
// of valid UTF-8 without control characters; the worst case well within
// an annotation's room.
func TestSnapshotsListBounded(t *testing.T) {
	long := strings.Repeat("é", 100) + "\n\x00<>&"
	var snaps []*vmv1.Snapshot
	for i := range kubeapi.MaxListedSnapshots + 6 {
		snaps = append(snaps, &vmv1.Snapshot{Name: fmt.Sprintf("s%02d", i), CreatedAt: int64(1796000000 + i), Description: long})
	}
	value, err := snapshotsValue(snaps)
	if err != nil {
		t.Fatal(err)
	}
	var entries []kubeapi.SnapshotEntry
	if err := json.Unmarshal([]byte(value), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != kubeapi.MaxListedSnapshots || entries[0].Name != "s06" || entries[len(entries)-1].Name != "s69" {
		t.Fatalf("%d entries, %s..%s; want the newest %d", len(entries), entries[0].Name, entries[len(entries)-1].Name, kubeapi.MaxListedSnapshots)
	}
	d := entries[0].Description
	if len(d) > kubeapi.MaxSnapshotDescription || !utf8.ValidString(d) || !strings.HasSuffix(d, "…") || strings.ContainsAny(d, "\n\x00") {
		t.Errorf("description %q (%d bytes): want at most %d of valid UTF-8 ending …, no control characters", d, len(d), kubeapi.MaxSnapshotDescription)
	}
	if got := cutDescription("a\nb<c>"); got != "a b<c>" {
		t.Errorf("cutDescription = %q, want a b<c>", got)
	}

	// The worst case: longest names, descriptions that JSON escapes most.
	for i, s := range snaps {
		s.Name = fmt.Sprintf("%02d", i) + strings.Repeat("n", 62)
		s.Description = strings.Repeat(`"`, 200)
	}
	if value, _ = snapshotsValue(snaps); len(value) > 24<<10 {
		t.Errorf("worst case: %d bytes, want at most 24 KiB", len(value))
	}
}
