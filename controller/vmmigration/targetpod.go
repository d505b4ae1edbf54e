package vmmigration

import (
	"math/rand/v2"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crimux/crimux/kubeapi"
)

// maxTargetName bounds T's name: a DNS label, as a pod's hostname is.
const maxTargetName = 63

// targetName is T's name: <S>-mig-<suffix>, S's part cut so that the
// whole is at most 63 characters (and ends in no '-' or '.').
func targetName(source, suffix string) string {
	tail := "-mig-" + suffix
	base := source
	if room := maxTargetName - len(tail); len(base) > room {
		base = strings.TrimRight(base[:room], "-.")
	}
	return base + tail
}

// randomSuffix is five random characters of [a-z0-9].
func randomSuffix() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// notCopied are S's annotations T does not get, besides every
// crimux.io/migrat* key (S's migration, T's is its own): what S's agent
// reported of S's VM (T's agent reports T's), and the edge-triggered
// requests, which S's agent did already and T's would do again (the
// agent keeps what it did per pod UID). crimux.io/power-state is kept: it
// is declarative, the state the user wants the VM in wherever it runs.
var notCopied = map[string]bool{
	kubeapi.AnnotationObservedPowerState:    true,
	kubeapi.AnnotationPowerStateError:       true,
	kubeapi.AnnotationRebootRequest:         true,
	kubeapi.AnnotationRebootResult:          true,
	kubeapi.AnnotationSnapshotRequest:       true,
	kubeapi.AnnotationSnapshotResult:        true,
	kubeapi.AnnotationRestoreRequest:        true,
	kubeapi.AnnotationRestoreResult:         true,
	kubeapi.AnnotationSnapshotDeleteRequest: true,
	kubeapi.AnnotationSnapshotDeleteResult:  true,
	kubeapi.AnnotationSnapshots:             true,
}

// copied reports whether S's annotation key goes to T.
func copied(key string) bool {
	return !strings.HasPrefix(key, "crimux.io/migrat") && !notCopied[key]
}

// targetPod is T: S's spec bound to node, S's labels, S's annotations
// but those above, and crimux.io/migrate-from naming S. Nothing the API
// server, the scheduler or kubelet gave S is taken: T's metadata is made
// afresh (no UID, resource version, creation time, owners, finalizers or
// managed fields), its status is empty, and the spec loses its ephemeral
// containers (added to S by kubectl debug) and scheduling gates (a pod
// bound to a node may have none).
func targetPod(s *corev1.Pod, name, node string) *corev1.Pod {
	annotations := map[string]string{}
	for k, v := range s.Annotations {
		if copied(k) {
			annotations[k] = v
		}
	}
	annotations[kubeapi.AnnotationMigrateFrom] = s.Namespace + "/" + s.Name
	var labels map[string]string
	if len(s.Labels) > 0 {
		labels = make(map[string]string, len(s.Labels))
		for k, v := range s.Labels {
			labels[k] = v
		}
	}
	spec := s.Spec.DeepCopy()
	spec.NodeName = node
	spec.EphemeralContainers = nil
	spec.SchedulingGates = nil
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   s.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: *spec,
	}
}
