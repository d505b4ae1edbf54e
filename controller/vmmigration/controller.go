// Package vmmigration is crimux's migration controller: it carries out
// the cluster's VMMigration objects (kubeapi.VMMigration), one worker
// each, within caps on how many run at once. A worker makes the target
// pod, relays the two node agents' answers between the source and target
// pods (kubeapi/migration.go lays the steps down), and deletes the source
// pod once the VM runs in the target, or the target if it failed; the
// object's status holds every step, so a controller restarted at any
// point (a new leader) resumes each migration where it was.
package vmmigration

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// Caps bound the migrations under way (0: the defaults, KubeVirt's):
// leaving one node, and in the cluster.
type Caps struct {
	PerNode, PerCluster int
}

// The default caps.
const (
	DefaultPerNode    = 2
	DefaultPerCluster = 5
)

func (c Caps) withDefaults() Caps {
	if c.PerNode <= 0 {
		c.PerNode = DefaultPerNode
	}
	if c.PerCluster <= 0 {
		c.PerCluster = DefaultPerCluster
	}
	return c
}

// resync is how often the controller looks at every migration without
// a watch event: a migration waiting for a slot starts within it.
const resync = 2 * time.Second

// Controller runs the cluster's migrations.
type Controller struct {
	Client kubernetes.Interface
	Store  Store
	Caps   Caps
	Timing Timing
	Log    *slog.Logger
	// Metrics are the migrations' series (nil: none).
	Metrics *Metrics
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu      sync.Mutex
	workers map[string]*running
	wg      sync.WaitGroup
}

// running is a worker under way.
type running struct {
	cancel context.CancelCauseFunc
	node   string // the source's
}

// Run carries out migrations until ctx ends, then waits for the workers
// to stop (each leaves its migration as its status says, for the next
// controller).
func (c *Controller) Run(ctx context.Context) {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Caps, c.Timing = c.Caps.withDefaults(), c.Timing.withDefaults()
	c.workers = map[string]*running{}
	wake := make(chan struct{}, 1)
	go c.watch(ctx, wake)
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		c.pass(ctx, wake)
		select {
		case <-ctx.Done():
			c.wg.Wait()
			return
		case <-tick.C:
		case <-wake:
		}
	}
}

// pass looks at every migration once: a cancel reaches its worker, a
// started one without a worker (a new controller) is resumed, a new one
// starts if the caps leave room, else it waits, Pending.
func (c *Controller) pass(ctx context.Context, wake chan<- struct{}) {
	migs, _, err := c.Store.List(ctx)
	if err != nil {
		c.Log.Warn("list VMMigrations", "err", err)
		return
	}
	c.Metrics.observePhases(migs)
	sort.Slice(migs, func(i, j int) bool { return migs[i].CreationTimestamp.Before(&migs[j].CreationTimestamp) })
	for _, m := range migs {
		if kubeapi.Final(m.Status.Phase) {
			continue
		}
		key := m.Namespace + "/" + m.Name
		c.mu.Lock()
		r := c.workers[key]
		c.mu.Unlock()
		switch {
		case r != nil:
			if m.Spec.Cancel {
				r.cancel(errCancelled)
			}
		case m.Status.TargetPod != "":
			c.start(ctx, m, m.Status.SourceNode, wake) // resumed: its slot is taken already
		default:
			c.startIfRoom(ctx, m, wake)
		}
	}
}

// startIfRoom starts a new migration if the caps leave room; else it
// says, in its status, that it waits.
func (c *Controller) startIfRoom(ctx context.Context, m *kubeapi.VMMigration, wake chan<- struct{}) {
	node := c.sourceNode(ctx, m)
	total, onNode := c.underWay(node)
	why := ""
	switch {
	case total >= c.Caps.PerCluster:
		why = fmt.Sprintf("waiting: %d migrations under way in the cluster, the cap (--max-migrations)", total)
	case node != "" && onNode >= c.Caps.PerNode:
		why = fmt.Sprintf("waiting: %d migrations leaving %s, the cap (--max-migrations-per-node)", onNode, node)
	}
	if why == "" {
		c.start(ctx, m, node, wake)
		return
	}
	if m.Status.Phase != kubeapi.VMMigrationPending || m.Status.Message != why {
		sw := newStatusWriter(c.Store, m, c.Log)
		sw.update(func(st *kubeapi.VMMigrationStatus) {
			st.Phase, st.Reason, st.Message = kubeapi.VMMigrationPending, "WaitingForSlot", why
		})
	}
}

// sourceNode is the node of m's source pod ("" if it cannot be read:
// the worker then says why it cannot start).
func (c *Controller) sourceNode(ctx context.Context, m *kubeapi.VMMigration) string {
	p, err := c.Client.CoreV1().Pods(m.Namespace).Get(ctx, m.Spec.Pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Spec.NodeName
}

// underWay counts the workers: in all, and of migrations leaving node.
func (c *Controller) underWay(node string) (total, onNode int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.workers {
		total++
		if r.node == node {
			onNode++
		}
	}
	return total, onNode
}

// start runs m's worker.
func (c *Controller) start(ctx context.Context, m *kubeapi.VMMigration, node string, wake chan<- struct{}) {
	key := m.Namespace + "/" + m.Name
	wctx, cancel := context.WithCancelCause(ctx)
	if m.Spec.Cancel {
		cancel(errCancelled)
	}
	c.mu.Lock()
	c.workers[key] = &running{cancel: cancel, node: node}
	c.mu.Unlock()
	if m.Status.Phase == "" || m.Status.Phase == kubeapi.VMMigrationPending {
		m = m.DeepCopy()
		now := metav1.NewTime(c.Now())
		m.Status.StartTime = &now
	}
	w := &worker{client: c.Client, status: newStatusWriter(c.Store, m, c.Log), timing: c.Timing, now: c.Now, metrics: c.Metrics,
		events: eventSink{kubeclient.Events{Client: c.Client, Component: FieldManager, Log: c.Log, Now: c.Now}}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel(nil)
		w.run(wctx)
		c.mu.Lock()
		delete(c.workers, key)
		c.mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}()
}

// watch wakes the controller on every change of a migration: a list,
// then a watch from its version, again whenever the watch ends.
func (c *Controller) watch(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		_, version, err := c.Store.List(ctx)
		if err == nil {
			var w watch.Interface
			if w, err = c.Store.Watch(ctx, version); err == nil {
				c.follow(ctx, w, wake)
				w.Stop()
				continue
			}
		}
		c.Log.Warn("watch VMMigrations", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(resync):
		}
	}
}

func (c *Controller) follow(ctx context.Context, w watch.Interface, wake chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// eventType is the type of an event about a final phase.
func eventType(phase string) string {
	if phase == kubeapi.VMMigrationFailed {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}
