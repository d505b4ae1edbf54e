package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Retry backoff of a pod (the VM not there yet, a failed patch, an API
// server away), doubling from the first to the last.
const (
	retryFirst = 500 * time.Millisecond
	retryMax   = 2 * time.Minute
)

// resyncPeriod is how often every pod is passed over again though nothing
// changed: it keeps crimux.io/observed-power-state current and brings a
// VM whose state was changed by other means back to its declared state.
// A resync reads the informer's cache, not the API server.
const resyncPeriod = 5 * time.Minute

// Options configure an Agent.
type Options struct {
	// Node is this node's name as kubelet registers it: the agent watches
	// the pods bound to it.
	Node string
	// StateDir is crimux's state dir; the agent keeps its records in its
	// nodeagent/ subdirectory.
	StateDir string
	// VMs is crimux's VM API, called in-process.
	VMs VMService
	Log *slog.Logger
}

// Agent is the node agent: an informer on the node's pods, a rate-limited
// queue of pods to pass over, and one worker doing so. One worker is
// enough for one node's pods, and it means no two passes (nor a pass and
// a record's removal) ever race.
type Agent struct {
	node  string
	pods  podWatcher
	rec   *reconciler
	queue workqueue.TypedRateLimitingInterface[queueItem]
	log   *slog.Logger
}

// queueItem is a pod to pass over (key: namespace/name), or a deleted
// pod whose record goes (deletedUID).
type queueItem struct {
	key        string
	deletedUID types.UID
}

// podWatcher lists and watches pods across namespaces.
type podWatcher interface {
	listPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	watchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// New returns an agent talking to the API server of rc with a core/v1
// client of its own (coreClient says why not client-go's typed one).
func New(rc *rest.Config, opts Options) (*Agent, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = "crimux-node-agent/" + opts.Node
	}
	client, err := newCoreClient(rc)
	if err != nil {
		return nil, fmt.Errorf("node agent: %w", err)
	}
	return newAgent(client, podWriter{client: client, node: opts.Node, now: time.Now}, opts)
}

func newAgent(pods podWatcher, kube kubeWriter, opts Options) (*Agent, error) {
	if opts.Node == "" || opts.VMs == nil || opts.Log == nil {
		return nil, errors.New("node agent: node, VM service and logger are required")
	}
	records, err := newRecordStore(filepath.Join(opts.StateDir, "nodeagent"))
	if err != nil {
		return nil, err
	}
	a := &Agent{
		node: opts.Node, pods: pods, log: opts.Log,
		rec: &reconciler{
			vms: opts.VMs, kube: kube, records: records, sent: newSentPatches(time.Now),
			log: opts.Log, now: time.Now,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[queueItem](retryFirst, retryMax),
			workqueue.TypedRateLimitingQueueConfig[queueItem]{Name: "crimux-node-agent"}),
	}
	// A Migrate's goroutine hands its progress and its end to the worker
	// (migrate_run.go). Add after the queue's shutdown is a no-op.
	a.rec.enqueue = func(key string) { a.queue.Add(queueItem{key: key}) }
	return a, nil
}

// Run watches the node's pods and applies their annotations until ctx
// ends, and returns once the Migrate calls it started have. Until the
// first list succeeds (the API server may be away) it does nothing at
// all.
func (a *Agent) Run(ctx context.Context) {
	// Last: the Migrate calls under way, cancelled with ctx, return once
	// the VM API has aborted them (the VMs stay where they were).
	defer a.rec.running.Wait()
	defer a.queue.ShutDown()
	store, informer := a.informer()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { informer.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	a.sweep(store)
	stop := context.AfterFunc(ctx, a.queue.ShutDown)
	defer stop()
	for a.processNext(ctx, store) {
	}
}

// sweep removes the records of pods no longer on the node: deleted while
// crimux was down. It runs after the first list and before the worker,
// so no record it reads is being written.
func (a *Agent) sweep(store cache.Store) {
	live := map[types.UID]bool{}
	for _, obj := range store.List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			live[pod.UID] = true
		}
	}
	uids, err := a.rec.records.uids()
	if err != nil {
		a.log.Warn("node agent: records of deleted pods not swept", "err", err)
		return
	}
	for _, uid := range uids {
		if !live[uid] {
			a.forget(uid)
		}
	}
}

// processNext passes over the next pod of the queue; false once the
// agent stops.
func (a *Agent) processNext(ctx context.Context, store cache.Store) bool {
	item, shutdown := a.queue.Get()
	if shutdown || ctx.Err() != nil {
		return false
	}
	defer a.queue.Done(item)
	again, err := a.handle(ctx, store, item)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		a.log.Warn("node agent: pod not reconciled; retrying", "pod", item.key, "retries", a.queue.NumRequeues(item), "err", err)
		a.queue.AddRateLimited(item)
	case again:
		a.queue.AddRateLimited(item)
	default:
		a.queue.Forget(item)
	}
	return true
}

func (a *Agent) handle(ctx context.Context, store cache.Store, item queueItem) (again bool, err error) {
	if item.deletedUID != "" {
		a.forget(item.deletedUID)
		return false, nil
	}
	obj, exists, err := store.GetByKey(item.key)
	if err != nil || !exists {
		return false, err // deleted: its deletedUID item removes the record
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false, nil
	}
	return a.rec.reconcile(ctx, pod)
}

// forget drops what the agent keeps of a deleted pod.
func (a *Agent) forget(uid types.UID) {
	a.rec.sent.forget(uid)
	a.rec.forgetMigration(uid)
	delete(a.rec.listed, uid)
	if err := a.rec.records.remove(uid); err != nil {
		a.log.Warn("node agent: record of a deleted pod not removed", "uid", string(uid), "err", err)
	}
}
