package vmmigration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/kubeapi"
)

// mirrorAnnotation marks a static pod's mirror: kubelet owns the pod.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// preflight refuses, before anything is changed, a migration that
// cannot be: S is not a running VM pod on another node than the target,
// is itself a migration's target, is being migrated already, holds a
// volume that is its node's alone, or the target node is missing, not
// Ready or cordoned.
func preflight(ctx context.Context, c kubernetes.Interface, m *kubeapi.VMMigration, s *corev1.Pod) error {
	name := s.Namespace + "/" + s.Name
	from, isTarget := s.Annotations[kubeapi.AnnotationMigrateFrom]
	switch {
	case s.DeletionTimestamp != nil:
		return fmt.Errorf("pod %s is being deleted", name)
	case isTarget && !arrived(s):
		return fmt.Errorf("pod %s is itself a migration's target (%s: %s) whose VM has not arrived: it cannot be migrated", name, kubeapi.AnnotationMigrateFrom, from)
	case s.Status.Phase != corev1.PodRunning:
		return fmt.Errorf("pod %s is %s, not Running: only a running VM can be migrated", name, phaseName(s.Status.Phase))
	case s.Spec.NodeName == "":
		return fmt.Errorf("pod %s is on no node (spec.nodeName is empty)", name)
	case m.Spec.TargetNode != "" && s.Spec.NodeName == m.Spec.TargetNode:
		return fmt.Errorf("pod %s runs on %s already", name, m.Spec.TargetNode)
	case s.Annotations[mirrorAnnotation] != "":
		return fmt.Errorf("pod %s is the mirror of a static pod of %s: kubelet, not the API, owns it", name, s.Spec.NodeName)
	case s.Spec.RuntimeClassName == nil || *s.Spec.RuntimeClassName == "":
		return fmt.Errorf("pod %s has no runtimeClassName: it is not a VM pod (crimux runs those under a RuntimeClass such as vm)", name)
	}
	if err := localVolumes(ctx, c, s); err != nil {
		return err
	}
	if err := noMigrationUnderWay(ctx, c, m, s); err != nil {
		return err
	}
	if m.Spec.TargetNode != "" {
		return nodeReady(ctx, c, m.Spec.TargetNode)
	}
	return nil
}

// arrived: target pod p's VM arrived, as its own finish says (for the
// token of its own migration-target, made for its migrate-from): it is a
// VM pod like any other now, which may move on (the node agents take it
// so: nodeagent's pass.arriving). A pod moved otherwise (crimuxctl vm
// migrate) has no such record and is refused.
func arrived(p *corev1.Pod) bool {
	var tgt kubeapi.MigrationTarget
	var fin kubeapi.MigrationFinish
	okT, errT := kubeapi.DecodeAnnotation(p.Annotations, kubeapi.AnnotationMigrationTarget, &tgt)
	okF, errF := kubeapi.DecodeAnnotation(p.Annotations, kubeapi.AnnotationMigrationFinish, &fin)
	return okT && okF && errT == nil && errF == nil && tgt.Token != "" &&
		tgt.Source == p.Annotations[kubeapi.AnnotationMigrateFrom] && fin.Token == tgt.Token && fin.Phase == kubeapi.MigrationSucceeded
}

// noMigrationUnderWay refuses S if its migrate-to names a target pod of
// it that is still there and is another migration's: another runs, or
// one was cut short before it could clean up.
func noMigrationUnderWay(ctx context.Context, c kubernetes.Interface, m *kubeapi.VMMigration, s *corev1.Pod) error {
	to := s.Annotations[kubeapi.AnnotationMigrateTo]
	if to == "" {
		return nil
	}
	t, err := c.CoreV1().Pods(s.Namespace).Get(ctx, to, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // an earlier attempt's, cleared when this one starts
	case err != nil:
		return fmt.Errorf("get pod %s/%s (%s of pod %s): %w", s.Namespace, to, kubeapi.AnnotationMigrateTo, s.Name, err)
	case t.Labels[kubeapi.LabelVMMigration] == m.Name:
		return nil // this migration's, made by an earlier worker
	case t.DeletionTimestamp == nil && t.Annotations[kubeapi.AnnotationMigrateFrom] == s.Namespace+"/"+s.Name:
		return fmt.Errorf("pod %s/%s is being migrated already, to pod %s (%s, VMMigration %s); if that migration is over, delete that pod first: kubectl delete pod -n %s %s",
			s.Namespace, s.Name, to, kubeapi.AnnotationMigrateTo, orUnsaid(t.Labels[kubeapi.LabelVMMigration]), s.Namespace, to)
	}
	return nil
}

// nodeReady refuses a target node that is missing, not Ready or
// cordoned: T is bound to it directly, past the scheduler's checks.
func nodeReady(ctx context.Context, c kubernetes.Interface, node string) error {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s not found", node)
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	var ready *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &n.Status.Conditions[i]
		}
	}
	switch {
	case ready == nil:
		return fmt.Errorf("node %s is not Ready (it reports no Ready condition)", node)
	case ready.Status != corev1.ConditionTrue:
		return fmt.Errorf("node %s is not Ready (Ready=%s%s)", node, ready.Status, prefixed(": ", join(ready.Reason, ready.Message)))
	case n.Spec.Unschedulable:
		return fmt.Errorf("node %s is cordoned (unschedulable): uncordon it first (kubectl uncordon %s)", node, node)
	}
	return nil
}

func phaseName(p corev1.PodPhase) string {
	if p == "" {
		return "Pending"
	}
	return string(p)
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
