package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/kubeapi"
)

// managedBy marks the budgets the controller makes, and removes once no
// pod has their label.
const managedBy = "app.kubernetes.io/managed-by"

// The PodDisruptionBudget of a VM pod refuses every eviction of the pods
// that carry its label (maxUnavailable 0): the pod, and the target pods
// of its migrations, which take the source's labels, so the budget
// follows the VM from node to node. A pod whose label is empty was let
// go (released): an eviction shuts it down.

// protect gives p its label and its budget, unless it has them or was
// let go.
func (c *Controller) protect(ctx context.Context, p *corev1.Pod) {
	name, labelled := p.Labels[kubeapi.LabelEvictionPDB]
	if labelled && name == "" {
		return // released
	}
	if !labelled {
		name = budgetName(p.Name)
		if err := c.setLabel(ctx, p, &name); err != nil {
			c.Log.Warn("drain: label a VM pod for its disruption budget", "pod", p.Namespace+"/"+p.Name, "err", err)
			return
		}
	}
	if _, err := c.pdbs.PodDisruptionBudgets(p.Namespace).Get(name); err == nil {
		return
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: map[string]string{managedBy: vmmigration.FieldManager}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 0},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{kubeapi.LabelEvictionPDB: name}},
		},
	}
	_, err := c.Client.PolicyV1().PodDisruptionBudgets(p.Namespace).Create(ctx, pdb, metav1.CreateOptions{FieldManager: vmmigration.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.Log.Warn("drain: create a VM pod's disruption budget", "pod", p.Namespace+"/"+p.Name, "budget", name, "err", err)
	}
}

// budgetName is the budget of a VM first protected as pod.
func budgetName(pod string) string {
	const prefix = "crimux-vm-"
	name := prefix + pod
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// release lets p go: its label emptied, no budget selects it any more,
// and the next eviction (the drain's, retried) shuts it down.
func (c *Controller) release(ctx context.Context, p *corev1.Pod) error {
	empty := ""
	return c.setLabel(ctx, p, &empty)
}

// setLabel sets p's budget label to value.
func (c *Controller) setLabel(ctx context.Context, p *corev1.Pod, value *string) error {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{%q:%q}}}`, p.UID, kubeapi.LabelEvictionPDB, *value)
	_, err := c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, "application/merge-patch+json", []byte(patch),
		metav1.PatchOptions{FieldManager: vmmigration.FieldManager})
	return err
}

// collectBudgets deletes the controller's budgets whose label no pod
// carries any more (the VM is gone).
func (c *Controller) collectBudgets(ctx context.Context, pods []*corev1.Pod) {
	sel := labels.SelectorFromSet(labels.Set{managedBy: vmmigration.FieldManager})
	pdbs, err := c.pdbs.List(sel)
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, p := range pods {
		if name := p.Labels[kubeapi.LabelEvictionPDB]; name != "" {
			used[p.Namespace+"/"+name] = true
		}
	}
	for _, b := range pdbs {
		if used[b.Namespace+"/"+b.Name] {
			continue
		}
		err := c.Client.PolicyV1().PodDisruptionBudgets(b.Namespace).Delete(ctx, b.Name, metav1.DeleteOptions{
			Preconditions: metav1.NewUIDPreconditions(string(b.UID))})
		if err != nil && !apierrors.IsNotFound(err) {
			c.Log.Warn("drain: delete a disruption budget no pod needs", "budget", b.Namespace+"/"+b.Name, "err", err)
		}
	}
}
