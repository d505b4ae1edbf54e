package vmmigration

import (
	"context"
	"crypto/sha256"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// startOrResume returns S and T. A migration not started yet is checked
// (preflight), its T made and recorded, S asked to migrate to it. A
// started one (its status names T) is resumed: S and T as they are now
// (nil: gone), S asked again if the last worker died before it asked.
func (w *worker) startOrResume(ctx context.Context) (s, t *corev1.Pod, err error) {
	m := w.status.get()
	if m.Status.TargetPod == "" {
		s, err = w.client.CoreV1().Pods(m.Namespace).Get(ctx, m.Spec.Pod, metav1.GetOptions{})
		if isGone(err) {
			return nil, nil, fmt.Errorf("pod %s/%s not found", m.Namespace, m.Spec.Pod)
		} else if err != nil {
			return nil, nil, fmt.Errorf("get pod %s/%s: %w", m.Namespace, m.Spec.Pod, err)
		}
		if err := preflight(ctx, w.client, m, s); err != nil {
			return nil, nil, err
		}
		if t, err = w.createTarget(ctx, m, s); err != nil {
			return nil, nil, err
		}
		w.started(s, t)
	} else {
		s = w.recorded(ctx, m.Spec.Pod, m.Status.SourceUID)
		t = w.recorded(ctx, m.Status.TargetPod, m.Status.TargetUID)
	}
	s, err = w.askSource(ctx, s)
	return s, t, err
}

// started records T in the status: from now on the migration resumes.
func (w *worker) started(s, t *corev1.Pod) {
	now := metav1.NewTime(w.now())
	w.status.update(func(st *kubeapi.VMMigrationStatus) {
		st.Phase = kubeapi.VMMigrationScheduling
		st.SourceNode, st.SourceUID = s.Spec.NodeName, string(s.UID)
		st.TargetPod, st.TargetUID, st.TargetNode = t.Name, string(t.UID), t.Spec.NodeName
		if st.StartTime == nil {
			st.StartTime = &now
		}
		st.Reason, st.Message = "TargetCreated", fmt.Sprintf("target pod %s created%s", t.Name, onNode(t.Spec.NodeName))
	})
	w.events.onMigration(w.status.get(), corev1.EventTypeNormal, "TargetCreated", w.status.get().Status.Message)
}

func onNode(node string) string {
	if node == "" {
		return " (the scheduler chooses its node)"
	}
	return " on " + node
}

// recorded is pod name of the given UID as it is now; nil when it is
// gone (or another pod has its name).
func (w *worker) recorded(ctx context.Context, name, uid string) *corev1.Pod {
	ns := w.status.get().Namespace
	p, err := w.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err == nil && string(p.UID) == uid {
		return p
	}
	return nil
}

// askSource is step 1: S's migrate-to names T, and nothing is left of an
// earlier attempt. A source that says so already (asked by an earlier
// worker), or that is gone, is left as it is. It returns S as it is
// then.
func (w *worker) askSource(ctx context.Context, s *corev1.Pod) (*corev1.Pod, error) {
	target := w.status.get().Status.TargetPod
	if s == nil || s.Annotations[kubeapi.AnnotationMigrateTo] == target {
		return s, nil
	}
	changes := map[string]*string{kubeapi.AnnotationMigrateTo: &target}
	for _, k := range kubeapi.MigrationAnnotations {
		if _, ok := s.Annotations[k]; ok {
			changes[k] = nil
		}
	}
	patched, err := kubeclient.PatchAnnotations(ctx, w.client, FieldManager, s, changes)
	if err != nil {
		return nil, fmt.Errorf("pod %s not asked to migrate: %w", s.Name, err)
	}
	return patched, nil
}

// createTarget creates T, or takes the one an earlier worker of this
// migration made (its name is the migration's: the same each time).
func (w *worker) createTarget(ctx context.Context, m *kubeapi.VMMigration, s *corev1.Pod) (*corev1.Pod, error) {
	t := targetPod(s, targetName(s.Name, uidSuffix(m.UID)), m.Spec.TargetNode)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[kubeapi.LabelVMMigration] = m.Name
	dropAvoided(&t.Spec, s.Annotations[kubeapi.AnnotationAvoidedNode])
	delete(t.Annotations, kubeapi.AnnotationAvoidedNode)
	if m.Spec.TargetNode == "" {
		avoidNode(&t.Spec, s.Spec.NodeName)
		t.Annotations[kubeapi.AnnotationAvoidedNode] = s.Spec.NodeName
	}
	pods := w.client.CoreV1().Pods(m.Namespace)
	created, err := pods.Create(ctx, t, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := pods.Get(ctx, t.Name, metav1.GetOptions{})
		if gerr == nil && cur.Labels[kubeapi.LabelVMMigration] == m.Name && cur.Annotations[kubeapi.AnnotationMigrateFrom] == s.Namespace+"/"+s.Name {
			return cur, nil // an earlier worker's
		}
		return nil, fmt.Errorf("create target pod %s: another pod has its name", t.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("create target pod %s: %w", t.Name, err)
	}
	return created, nil
}

// uidSuffix is five characters of [a-z0-9] from the migration's UID.
func uidSuffix(uid types.UID) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	sum := sha256.Sum256([]byte(uid))
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(b)
}

// avoidNode keeps the scheduler from putting T on S's node: a required
// node affinity term, added to each of S's terms (or alone).
func avoidNode(spec *corev1.PodSpec, node string) {
	if node == "" {
		return
	}
	not := corev1.NodeSelectorRequirement{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{not}}}}
		return
	}
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchExpressions = append(req.NodeSelectorTerms[i].MatchExpressions, not)
	}
}

// dropAvoided takes out of spec the term an earlier migration's
// avoidNode added for node (S, itself a target, took it from its own
// source): S's node is to be avoided now, not S's source's.
func dropAvoided(spec *corev1.PodSpec, node string) {
	if node == "" || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil ||
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return
	}
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	var terms []corev1.NodeSelectorTerm
	for _, term := range req.NodeSelectorTerms {
		var kept []corev1.NodeSelectorRequirement
		for _, r := range term.MatchExpressions {
			if r.Key == "kubernetes.io/hostname" && r.Operator == corev1.NodeSelectorOpNotIn && len(r.Values) == 1 && r.Values[0] == node {
				continue
			}
			kept = append(kept, r)
		}
		term.MatchExpressions = kept
		if len(term.MatchExpressions) > 0 || len(term.MatchFields) > 0 {
			terms = append(terms, term)
		}
	}
	if len(terms) == 0 {
		spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
		return
	}
	req.NodeSelectorTerms = terms
}
