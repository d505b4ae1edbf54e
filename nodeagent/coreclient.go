package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// coreClient is the agent's client of the API server's core/v1 group:
// pods and events, on a REST client whose scheme knows core/v1 alone.
// client-go's typed clients register every API group of Kubernetes
// (k8s.io/client-go/kubernetes/scheme: 55 packages of k8s.io/api) when
// crimux starts, node agent or not: 22 MB of crimux's binary and 10 MiB of
// its resident memory (docs/benchmarks.md), for two resources.
type coreClient struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

func newCoreClient(rc *rest.Config) (*coreClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil { // with meta/v1's options and Status
		return nil, err
	}
	cfg := rest.CopyConfig(rc)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &coreClient{rest: c, params: runtime.NewParameterCodec(scheme)}, nil
}

// listPods lists the pods of every namespace that opts select.
func (c *coreClient) listPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

// watchPods watches the pods of every namespace that opts select.
func (c *coreClient) watchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource("pods").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Watch(ctx)
}

// timeout is the request timeout the typed clients give a list or watch.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// mergePatchPod sends a JSON merge patch of a pod and returns the pod
// patched.
func (c *coreClient) mergePatchPod(ctx context.Context, namespace, name string, patch []byte) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rest.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).Body(patch).Do(ctx).Into(out)
	return out, err
}

// createEvent creates ev in its namespace.
func (c *coreClient) createEvent(ctx context.Context, ev *corev1.Event) error {
	if ev.Namespace == "" {
		return fmt.Errorf("event %s has no namespace", ev.Name)
	}
	return c.rest.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}
