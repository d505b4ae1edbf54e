package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// ConditionLiveMigratable is the pod condition the drain sets on a VM
// pod whose drain migration failed: False, with the reason.
const ConditionLiveMigratable corev1.PodConditionType = "crimux.io/LiveMigratable"

// releaseAfter is how many failed drain migrations of a pod whose
// strategy allows it (live-migrate-or-shutdown) let it go; one that
// cannot move at all (a node-local volume) goes at once.
const releaseAfter = 3

// report tells of p's failed drain migration last on p and its node
// (events, and p's LiveMigratable condition).
func (c *Controller) report(ctx context.Context, p *corev1.Pod, last *kubeapi.VMMigration) {
	msg := fmt.Sprintf("the VM cannot move off %s (%s): the drain waits for it (eviction strategy %s); the controller tries again in %s",
		p.Spec.NodeName, last.Status.Message, c.strategy(p), backoff(c.tries[p.Namespace+"/"+p.Name].failed))
	c.tell(p, "VMBlocksDrain", msg)
	c.setMigratable(ctx, p, last.Status.Reason, msg)
}

// letGo: p's strategy lets the drain shut it down, and it cannot move
// at all (a node-local volume) or failed releaseAfter times.
func (c *Controller) letGo(p *corev1.Pod, last *kubeapi.VMMigration) bool {
	tr := c.tries[p.Namespace+"/"+p.Name]
	return c.strategy(p) == kubeapi.EvictionLiveMigrateOrShutdown && (last.Status.Reason == "LocalVolume" || tr.failed >= releaseAfter)
}

// releaseReported lets p go, and says so on p and its node.
func (c *Controller) releaseReported(ctx context.Context, p *corev1.Pod, last *kubeapi.VMMigration) {
	if err := c.release(ctx, p); err != nil {
		c.Log.Warn("drain: let a VM go", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	msg := fmt.Sprintf("the VM cannot move off %s (%s): its eviction strategy %s lets the drain shut it down",
		p.Spec.NodeName, last.Status.Message, kubeapi.EvictionLiveMigrateOrShutdown)
	c.tell(p, "VMReleasedToDrain", msg)
	c.setMigratable(ctx, p, last.Status.Reason, msg)
}

// tell records a warning on p and on its node.
func (c *Controller) tell(p *corev1.Pod, reason, msg string) {
	ev := kubeclient.Events{Client: c.Client, Component: vmmigration.FieldManager, Log: c.Log, Now: c.Now}
	ev.Pod(p, corev1.EventTypeWarning, reason, msg)
	if n, err := c.nodes.Get(p.Spec.NodeName); err == nil {
		ev.Node(n, corev1.EventTypeWarning, reason, fmt.Sprintf("pod %s/%s: %s", p.Namespace, p.Name, msg))
	}
}

// setMigratable sets p's LiveMigratable condition False with reason.
func (c *Controller) setMigratable(ctx context.Context, p *corev1.Pod, reason, msg string) {
	cond := corev1.PodCondition{Type: ConditionLiveMigratable, Status: corev1.ConditionFalse, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(c.Now())}
	patch, err := kubeclient.ConditionPatch(p.UID, cond)
	if err == nil {
		_, err = c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: vmmigration.FieldManager}, "status")
	}
	if err != nil {
		c.Log.Warn("drain: set a VM pod's LiveMigratable condition", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}
