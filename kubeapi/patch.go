package kubeapi

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"
)

// AnnotationPatch is a JSON merge patch of a pod's annotations (a nil
// value removes the key) carrying the pod's UID, if known: UIDs are
// immutable, so the patch fails rather than land on another pod of that
// name. The node agent and kubectl-crimux patch with it.
func AnnotationPatch(uid types.UID, changes map[string]*string) ([]byte, error) {
	type meta struct {
		UID         types.UID          `json:"uid,omitempty"`
		Annotations map[string]*string `json:"annotations"`
	}
	return json.Marshal(struct {
		Metadata meta `json:"metadata"`
	}{meta{uid, changes}})
}
