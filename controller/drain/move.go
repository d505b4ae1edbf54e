package drain

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// LabelDrainNode, on a VMMigration the drain asked for: the node it
// empties.
const LabelDrainNode = "crimux.io/drain-node"

// tries are a pod's drain migrations so far: how many failed, when the
// next may start, and the last failure reported.
type tries struct {
	failed   int
	next     time.Time
	reported string // the migration whose failure was reported
}

// backoff is the wait before another drain migration of a pod whose
// last one failed: 30 s, doubling, at most 5 minutes.
func backoff(failed int) time.Duration {
	d := 30 * time.Second << min(failed-1, 4)
	return min(d, 5*time.Minute)
}

// moveOffCordoned asks for a migration of each protected, running VM on
// a cordoned node that has none under way (one not running yet is
// waited for); a failed one is reported and,
// per the pod's strategy, tried again later or let go.
func (c *Controller) moveOffCordoned(ctx context.Context, vms []*corev1.Pod) {
	var draining []*corev1.Pod
	for _, p := range vms {
		if p.Status.Phase == corev1.PodRunning && c.onCordoned(p) && p.Labels[kubeapi.LabelEvictionPDB] != "" && c.strategy(p) != "" && !arriving(p) {
			draining = append(draining, p)
		}
	}
	if len(draining) == 0 {
		return
	}
	migs, _, err := c.Migrations.List(ctx)
	if err != nil {
		c.Log.Warn("drain: list VMMigrations", "err", err)
		return
	}
	last := map[string]*kubeapi.VMMigration{}
	for _, m := range migs {
		key := m.Namespace + "/" + m.Spec.Pod
		if l := last[key]; l == nil || l.CreationTimestamp.Before(&m.CreationTimestamp) {
			last[key] = m
		}
	}
	for _, p := range draining {
		c.move(ctx, p, last[p.Namespace+"/"+p.Name])
	}
}

// onCordoned: p's node is cordoned (unschedulable).
func (c *Controller) onCordoned(p *corev1.Pod) bool {
	if p.Spec.NodeName == "" {
		return false
	}
	n, err := c.nodes.Get(p.Spec.NodeName)
	return err == nil && n.Spec.Unschedulable
}

// arriving: p is a migration's target whose VM has not arrived: its
// migration, not the drain, decides its fate.
func arriving(p *corev1.Pod) bool {
	_, target := p.Annotations[kubeapi.AnnotationMigrateFrom]
	_, finished := p.Annotations[kubeapi.AnnotationMigrationFinish]
	return target && !finished
}

// move asks for p's migration off its node, unless one is under way
// (last, the pod's latest, not final) or a failed one's backoff runs.
func (c *Controller) move(ctx context.Context, p *corev1.Pod, last *kubeapi.VMMigration) {
	key := p.Namespace + "/" + p.Name
	tr := c.tries[key]
	if tr == nil {
		tr = &tries{}
		c.tries[key] = tr
	}
	if last != nil && !kubeapi.Final(last.Status.Phase) {
		return
	}
	if last != nil && last.Status.Phase == kubeapi.VMMigrationFailed && last.Labels[LabelDrainNode] == p.Spec.NodeName {
		if tr.reported != last.Name {
			tr.reported, tr.failed = last.Name, tr.failed+1
			tr.next = c.Now().Add(backoff(tr.failed))
			if !c.letGo(p, last) {
				c.report(ctx, p, last)
			}
		}
		if c.letGo(p, last) {
			c.releaseReported(ctx, p, last)
			return
		}
	}
	if c.Now().Before(tr.next) {
		return
	}
	m := &kubeapi.VMMigration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeapi.VMMigrationGroup + "/" + kubeapi.VMMigrationVersion, Kind: kubeapi.VMMigrationKind},
		ObjectMeta: metav1.ObjectMeta{Name: migrationName(p.Name), Namespace: p.Namespace,
			Labels: map[string]string{LabelDrainNode: p.Spec.NodeName}},
		Spec: kubeapi.VMMigrationSpec{Pod: p.Name},
	}
	if _, err := c.Migrations.Create(ctx, m); err != nil {
		c.Log.Warn("drain: ask for a VM's migration", "pod", key, "err", err)
		return
	}
	c.Log.Info("drain: moving a VM off its cordoned node", "pod", key, "node", p.Spec.NodeName, "migration", m.Name)
}

// migrationName is a drain migration's: the pod's name, cut, and a
// random part.
func migrationName(pod string) string { return kubeclient.RandomName(pod + "-drain-") }
