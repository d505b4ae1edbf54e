package nodeagent

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// informer lists and watches the pods bound to the agent's node (the
// field selector spec.nodeName=<node>: the API server filters, so the
// agent holds only its node's pods) into a store, queueing each change.
// The reflector re-lists by itself after a watch breaks (an API server
// away, restarted, slow).
func (a *Agent) informer() (cache.Store, cache.Controller) {
	logger := logr.FromSlogHandler(a.log.Handler())
	return cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &logger,
		ListerWatcher: a.listWatch(),
		ObjectType:    &corev1.Pod{},
		Handler:       a.handlers(),
		ResyncPeriod:  resyncPeriod,
		Transform:     dropManagedFields,
	})
}

func (a *Agent) listWatch() *cache.ListWatch {
	selector := fields.OneTermEqualSelector("spec.nodeName", a.node).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return a.pods.listPods(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return a.pods.watchPods(ctx, opts)
		},
	}
}

// handlers queue a pass over every pod added or changed (a resync counts
// as a change), and the removal of a deleted pod's record.
func (a *Agent) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: a.enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			// A re-list may show a pod deleted and made again under its
			// name as an update.
			if was, ok := oldObj.(*corev1.Pod); ok {
				if is, ok := newObj.(*corev1.Pod); ok && was.UID != is.UID {
					a.queue.Add(queueItem{deletedUID: was.UID})
				}
			}
			a.enqueue(newObj)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				a.queue.Add(queueItem{deletedUID: pod.UID})
			}
		},
	}
}

func (a *Agent) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		a.log.Warn("node agent: pod without a key", "err", err)
		return
	}
	a.queue.Add(queueItem{key: key})
}

// dropManagedFields keeps server-side apply bookkeeping out of the cache:
// the agent never reads it.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
