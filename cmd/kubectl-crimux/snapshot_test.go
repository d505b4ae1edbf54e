package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/crimux/crimux/kubeapi"
)

// withAnnotation sets one annotation of a vmPod.
func withAnnotation(key, value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[key] = value }
}

// TestSnapshotList: snapshot list prints the pod's crimux.io/snapshots as
// a table, control characters made spaces; an empty list says so; a pod
// without one, or with one that is not a list, is an error saying why.
func TestSnapshotList(t *testing.T) {
	c := fake.NewClientset(
		vmPod("vm1", "node1", withAnnotation(kubeapi.AnnotationSnapshots,
			`[{"name":"base","created":"2026-12-01T12:00:00Z","description":"before the upgrade"},`+
				`{"name":"s2","description":"x\u001b[2Jy\tz"},{"name":"s3","created":"2026-12-02T08:30:00Z"}]`)),
		vmPod("empty", "node1", withAnnotation(kubeapi.AnnotationSnapshots, "[]")),
		vmPod("unlisted", "node1"),
		vmPod("garbled", "node1", withAnnotation(kubeapi.AnnotationSnapshots, "base,s2")),
	)
	code, out, errOut := runRequest(c, "snapshot", "list", "vm1")
	want := "NAME   CREATED                DESCRIPTION\n" +
		"base   2026-12-01T12:00:00Z   before the upgrade\n" +
		"s2     <unknown>              x [2Jy z\n" +
		"s3     2026-12-02T08:30:00Z   <none>\n"
	if code != 0 || out != want {
		t.Errorf("snapshot list vm1: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	if code, out, errOut := runRequest(c, "snapshot", "list", "empty"); code != 0 || out != "" || errOut != "No snapshots of pod default/empty.\n" {
		t.Errorf("an empty list: exit %d, %q %q", code, out, errOut)
	}
	for _, tc := range []struct{ args, want string }{
		{"snapshot list unlisted", "pod default/unlisted has no crimux.io/snapshots: its node agent lists"},
		{"snapshot list garbled", "pod default/garbled: annotations[crimux.io/snapshots]: invalid character"},
		{"snapshot list nope", `"nope" not found`},
		{"snapshot list", "snapshot list takes one pod, got 0 arguments: kubectl crimux snapshot list POD"},
		{"snapshot list vm1 vm2", "snapshot list takes one pod, got 2 arguments"},
	} {
		if code, _, errOut := runRequest(c, strings.Fields(tc.args)...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestSnapshotDelete: snapshot delete sets the delete request and waits
// for the agent's result for that name; a failure is an error with the
// agent's reason; a name asked for before is refused up front, with the
// answer it had.
func TestSnapshotDelete(t *testing.T) {
	c := fake.NewClientset(vmPod("vm1", "node1"))
	fakeAgent(t, c, "vm1", func(a map[string]string) map[string]string {
		switch v := a[kubeapi.AnnotationSnapshotDeleteRequest]; v {
		case "":
			return nil
		case "nope":
			return map[string]string{kubeapi.AnnotationSnapshotDeleteResult: v + `: failed: snapshot_name "nope": the VM has no snapshot of that name: not found`}
		default:
			return map[string]string{kubeapi.AnnotationSnapshotDeleteResult: v + ": deleted"}
		}
	})
	if code, out, errOut := runRequest(c, "snapshot", "delete", "vm1", "s1"); code != 0 || out != "pod default/vm1: snapshot s1 deleted\n" {
		t.Errorf("snapshot delete vm1 s1: exit %d, %q %q; want the snapshot deleted", code, out, errOut)
	}
	if got := getPod(t, c, "vm1").Annotations[kubeapi.AnnotationSnapshotDeleteRequest]; got != "s1" {
		t.Errorf("%s = %q, want s1", kubeapi.AnnotationSnapshotDeleteRequest, got)
	}
	if code, _, errOut := runRequest(c, "snapshot", "delete", "vm1", "nope"); code != 1 ||
		!strings.Contains(errOut, "crimux.io/snapshot-delete-request=nope set, but failed: ") || !strings.Contains(errOut, "no snapshot of that name") {
		t.Errorf("a failed delete: exit %d, %q; want the agent's reason", code, errOut)
	}
	if code, _, errOut := runRequest(c, "snapshot", "delete", "vm1", "s2"); code != 0 || errOut != "" {
		t.Errorf("another name: exit %d, %q", code, errOut)
	}
	code, _, errOut := runRequest(c, "snapshot", "delete", "vm1", "s2")
	if code != 1 || !strings.Contains(errOut, errAlreadyAsked.Error()) || !strings.Contains(errOut, "(its answer: snapshot s2 deleted)") {
		t.Errorf("the name the pod asks for already: exit %d, %q; want it refused, with its answer", code, errOut)
	}
	for _, args := range []string{"snapshot delete vm1", "snapshot delete", "snapshot delete vm1 s1 s2"} {
		if code, _, errOut := runRequest(c, strings.Fields(args)...); code != 1 ||
			!strings.Contains(errOut, "snapshot delete takes a pod and a snapshot name") {
			t.Errorf("%s: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
}

// TestSnapshotCreateAlias: "snapshot create POD NAME" is "snapshot POD
// NAME"; without a sub-verb, snapshot takes a pod and a name as before,
// and its usage error names the sub-verbs.
func TestSnapshotCreateAlias(t *testing.T) {
	c := fake.NewClientset(vmPod("vm1", "node1"))
	fakeAgent(t, c, "vm1", func(a map[string]string) map[string]string {
		if v := a[kubeapi.AnnotationSnapshotRequest]; v != "" {
			return map[string]string{kubeapi.AnnotationSnapshotResult: v + ": created"}
		}
		return nil
	})
	for _, args := range []string{"snapshot create vm1 s1", "snapshot vm1 s2"} {
		if code, out, errOut := runRequest(c, strings.Fields(args)...); code != 0 || out != "pod default/vm1: created\n" {
			t.Errorf("%s: exit %d, %q %q", args, code, out, errOut)
		}
	}
	for _, args := range []string{"snapshot create vm1", "snapshot vm1", "snapshot"} {
		if code, _, errOut := runRequest(c, strings.Fields(args)...); code != 1 || !strings.Contains(errOut, "snapshot list POD or snapshot delete POD NAME") {
			t.Errorf("%s: exit %d, %q; want a usage error naming the sub-verbs", args, code, errOut)
		}
	}
}
