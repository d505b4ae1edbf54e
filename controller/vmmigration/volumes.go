package vmmigration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/kubeapi"
)

// localVolumes refuses S if a volume of it is its node's alone: a
// hostPath, or a claim bound to a local (or hostPath) PersistentVolume,
// or to one whose node affinity names S's node alone. The target node
// would find another directory or none: such a VM cannot move. A volume
// the pod's crimux.io/shared-volumes names is taken as shared storage
// the same on every node (a hostPath onto a cluster filesystem).
func localVolumes(ctx context.Context, c kubernetes.Interface, s *corev1.Pod) error {
	shared := strings.Split(s.Annotations[kubeapi.AnnotationSharedVolumes], ",")
	for _, v := range s.Spec.Volumes {
		if slices.Contains(shared, v.Name) {
			continue
		}
		why, err := volumeLocal(ctx, c, s, v)
		if err != nil {
			return err
		}
		if why != "" {
			return &notMovable{reason: "LocalVolume", msg: fmt.Sprintf("pod %s/%s cannot move: volume %s is %s (list it in %s if it is shared storage the same on every node)",
				s.Namespace, s.Name, v.Name, why, kubeapi.AnnotationSharedVolumes)}
		}
	}
	return nil
}

// volumeLocal says why v is S's node's alone ("" if it is not).
func volumeLocal(ctx context.Context, c kubernetes.Interface, s *corev1.Pod, v corev1.Volume) (string, error) {
	switch {
	case v.HostPath != nil:
		return "a hostPath (" + v.HostPath.Path + ")", nil
	case v.PersistentVolumeClaim == nil:
		return "", nil
	}
	claim := v.PersistentVolumeClaim.ClaimName
	pvc, err := c.CoreV1().PersistentVolumeClaims(s.Namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("volume %s: claim %s: %w", v.Name, claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		return "", nil
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("volume %s: persistent volume %s: %w", v.Name, pvc.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.Local != nil:
		return "claim " + claim + " on a local persistent volume (" + pv.Name + ")", nil
	case pv.Spec.HostPath != nil:
		return "claim " + claim + " on a hostPath persistent volume (" + pv.Name + ")", nil
	case pinnedTo(pv, s.Spec.NodeName):
		return "claim " + claim + " on persistent volume " + pv.Name + ", whose node affinity names " + s.Spec.NodeName + " alone", nil
	}
	return "", nil
}

// pinnedTo: pv's node affinity lets it be used on node alone (by its
// hostname).
func pinnedTo(pv *corev1.PersistentVolume, node string) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) == 0 {
		return false
	}
	for _, term := range na.Required.NodeSelectorTerms {
		named := false
		for _, r := range term.MatchExpressions {
			if r.Key == "kubernetes.io/hostname" && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 && r.Values[0] == node {
				named = true
			}
		}
		if !named {
			return false
		}
	}
	return true
}
