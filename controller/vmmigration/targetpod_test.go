package vmmigration

import (
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/crimux/crimux/kubeapi"
)

func TestTargetPod(t *testing.T) {
	now := metav1.Now()
	yes := true
	s := vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.CreationTimestamp, p.Generation = now, 3
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: &yes}}
		p.Finalizers = []string{"example.com/keep"}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		p.Labels["tier"] = "db"
		for k, v := range map[string]string{
			kubeapi.AnnotationMigrateTo:          "vm1-mig-old00",
			kubeapi.AnnotationMigrateFrom:        "default/vm0",
			kubeapi.AnnotationMigrationResult:    "{}",
			kubeapi.AnnotationMigrationFinish:    "{}",
			kubeapi.AnnotationObservedPowerState: "Running",
			kubeapi.AnnotationPowerStateError:    "x",
			kubeapi.AnnotationSnapshotRequest:    "snap1",
			kubeapi.AnnotationSnapshotResult:     "snap1: created",
			kubeapi.AnnotationRebootRequest:      "r1",
			kubeapi.AnnotationRestoreRequest:     "snap0",
			"example.com/owner":                  "ops",
		} {
			p.Annotations[k] = v
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}}}
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
		p.Spec.NodeSelector = map[string]string{"crimux.io/vm": "true"}
	})
	tp := targetPod(s, "vm1-mig-abcde", "node2")

	if tp.Name != "vm1-mig-abcde" || tp.Namespace != "default" {
		t.Errorf("name %s/%s", tp.Namespace, tp.Name)
	}
	if tp.Spec.NodeName != "node2" {
		t.Errorf("nodeName %q", tp.Spec.NodeName)
	}
	if tp.UID != "" || tp.ResourceVersion != "" || !tp.CreationTimestamp.IsZero() || tp.Generation != 0 ||
		tp.OwnerReferences != nil || tp.Finalizers != nil || tp.ManagedFields != nil {
		t.Errorf("metadata copied from S: %+v", tp.ObjectMeta)
	}
	if tp.Status.Phase != "" || tp.Status.PodIP != "" || len(tp.Status.ContainerStatuses) != 0 {
		t.Errorf("status copied: %+v", tp.Status)
	}
	if tp.Spec.EphemeralContainers != nil || tp.Spec.SchedulingGates != nil {
		t.Errorf("ephemeral containers or scheduling gates copied")
	}
	if *tp.Spec.RuntimeClassName != "vm" || tp.Spec.Containers[0].Image != s.Spec.Containers[0].Image || tp.Spec.NodeSelector["crimux.io/vm"] != "true" {
		t.Errorf("spec not S's: %+v", tp.Spec)
	}
	if tp.Labels["app"] != "web" || tp.Labels["tier"] != "db" || len(tp.Labels) != 2 {
		t.Errorf("labels %v", tp.Labels)
	}
	want := map[string]string{
		kubeapi.AnnotationMigrateFrom: "default/vm1",
		kubeapi.AnnotationPowerState:  "Running",
		"crimux.io/vm-cpus":           "2",
		"example.com/owner":           "ops",
	}
	if len(tp.Annotations) != len(want) {
		t.Errorf("annotations %v, want %v", tp.Annotations, want)
	}
	for k, v := range want {
		if tp.Annotations[k] != v {
			t.Errorf("annotations[%s] = %q, want %q", k, tp.Annotations[k], v)
		}
	}
	// S is left as it was.
	if s.Spec.NodeName != "node1" || len(s.Spec.EphemeralContainers) != 1 || s.Annotations[kubeapi.AnnotationMigrateTo] == "" {
		t.Error("S changed")
	}
	tp.Labels["app"] = "changed"
	if s.Labels["app"] != "web" {
		t.Error("T shares S's labels")
	}
}

func TestTargetName(t *testing.T) {
	for _, tc := range []struct{ source, want string }{
		{"vm1", "vm1-mig-abcde"},
		{strings.Repeat("a", 53), strings.Repeat("a", 53) + "-mig-abcde"},
		{strings.Repeat("a", 54), strings.Repeat("a", 53) + "-mig-abcde"},
		{strings.Repeat("a", 200), strings.Repeat("a", 53) + "-mig-abcde"},
		{strings.Repeat("a", 52) + "-b", strings.Repeat("a", 52) + "-mig-abcde"},
		{strings.Repeat("a", 51) + ".-b", strings.Repeat("a", 51) + "-mig-abcde"},
	} {
		got := targetName(tc.source, "abcde")
		if got != tc.want {
			t.Errorf("targetName(%q) = %q, want %q", tc.source, got, tc.want)
		}
		if len(got) > 63 || len(validation.IsDNS1123Subdomain(got)) > 0 {
			t.Errorf("targetName(%q) = %q: not a pod name of at most 63 characters", tc.source, got)
		}
	}
	re := regexp.MustCompile(`^[a-z0-9]{5}$`)
	seen := map[string]bool{}
	for range 20 {
		s := randomSuffix()
		if !re.MatchString(s) {
			t.Fatalf("randomSuffix() = %q", s)
		}
		seen[s] = true
	}
	if len(seen) < 15 {
		t.Errorf("randomSuffix is hardly random: %v", seen)
	}
}

// TestTargetPodDropsSnapshotAnnotations: a migration's target pod gets
// neither S's delete request (T's agent would delete again) nor S's
// agent's answers and list: T's agent lists T's own.
func TestTargetPodDropsSnapshotAnnotations(t *testing.T) {
	s := vmPod("vm1", "node1", func(p *corev1.Pod) {
		p.Annotations[kubeapi.AnnotationSnapshotDeleteRequest] = "snap0"
		p.Annotations[kubeapi.AnnotationSnapshotDeleteResult] = "snap0: deleted"
		p.Annotations[kubeapi.AnnotationSnapshots] = `[{"name":"snap1"}]`
	})
	tp := targetPod(s, "vm1-mig-abcde", "node2")
	for _, k := range []string{kubeapi.AnnotationSnapshotDeleteRequest, kubeapi.AnnotationSnapshotDeleteResult, kubeapi.AnnotationSnapshots} {
		if v, ok := tp.Annotations[k]; ok {
			t.Errorf("the target pod has %s: %q", k, v)
		}
	}
}
