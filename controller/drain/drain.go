// Package drain makes node maintenance move VMs instead of stopping
// them. Each VM pod whose eviction strategy is live migration
// (crimux.io/eviction, or the controller's default) is protected by a
// PodDisruptionBudget that refuses its eviction (protect.go); when its
// node is cordoned (kubectl drain does that first), the controller asks
// for a VMMigration of it (the scheduler picks the target, never the
// cordoned node), and kubectl drain's evictions, retried, end once the
// source pod is gone. A VM that cannot move is reported on its pod and
// its node, and per its strategy blocks the drain or is let go (shut
// down by the eviction).
package drain

import (
	"context"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/kubeapi"
)

// Controller protects VM pods from eviction and moves them off cordoned
// nodes.
type Controller struct {
	Client     kubernetes.Interface
	Migrations vmmigration.Store
	// Eviction is the strategy of a VM pod without crimux.io/eviction
	// ("" : none, Kubernetes evicts it).
	Eviction string
	// RuntimeClasses are those of VM pods.
	RuntimeClasses []string
	Log            *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	pods  corelisters.PodLister
	nodes corelisters.NodeLister
	pdbs  policylisters.PodDisruptionBudgetLister
	// tries are the drain migrations asked for per pod, for the backoff.
	tries map[string]*tries
}

// resync is how often the controller looks at every VM pod without an
// event.
const resync = 5 * time.Second

// Run protects and moves until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.tries = map[string]*tries{}
	f := informers.NewSharedInformerFactory(c.Client, 10*time.Minute)
	c.pods, c.nodes = f.Core().V1().Pods().Lister(), f.Core().V1().Nodes().Lister()
	c.pdbs = f.Policy().V1().PodDisruptionBudgets().Lister()
	wake := make(chan struct{}, 1)
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { nudge(wake) },
		UpdateFunc: func(any, any) { nudge(wake) },
		DeleteFunc: func(any) { nudge(wake) },
	}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer(), f.Policy().V1().PodDisruptionBudgets().Informer()} {
		if _, err := inf.AddEventHandler(poke); err != nil {
			c.Log.Error("drain: informer", "err", err)
			return
		}
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	f.WaitForCacheSync(ctx.Done())
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		c.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		}
	}
}

func nudge(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// pass protects every VM pod that asks for it, drops budgets no pod
// needs, and moves the protected VMs of cordoned nodes.
func (c *Controller) pass(ctx context.Context) {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	var vms []*corev1.Pod
	for _, p := range pods {
		if c.isVM(p) && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			vms = append(vms, p)
		}
	}
	for _, p := range vms {
		if c.strategy(p) != "" {
			c.protect(ctx, p)
		}
	}
	c.collectBudgets(ctx, pods)
	c.moveOffCordoned(ctx, vms)
}

// isVM: p runs under a VM RuntimeClass.
func (c *Controller) isVM(p *corev1.Pod) bool {
	rc := p.Spec.RuntimeClassName
	return rc != nil && slices.Contains(c.RuntimeClasses, *rc)
}

// strategy is p's eviction strategy: its annotation, else the default;
// "" or shutdown: none of the controller's.
func (c *Controller) strategy(p *corev1.Pod) string {
	s, ok := p.Annotations[kubeapi.AnnotationEviction]
	if !ok {
		s = c.Eviction
	}
	switch s {
	case kubeapi.EvictionLiveMigrate, kubeapi.EvictionLiveMigrateOrShutdown:
		return s
	}
	return ""
}
