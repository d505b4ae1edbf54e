// Package kubeclient is what crimux's clients of the Kubernetes API
// (kubectl-crimux, the controller) do with pods: patch their annotations,
// delete one by its UID, wait for it to go, follow it through a watch.
package kubeclient

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/crimux/crimux/kubeapi"
)

// PatchAnnotations applies changes to pod's annotations (a nil value
// removes the key) as fieldManager, retrying what the API server may
// answer otherwise next time.
func PatchAnnotations(ctx context.Context, c kubernetes.Interface, fieldManager string, pod *corev1.Pod, changes map[string]*string) (*corev1.Pod, error) {
	patch, err := kubeapi.AnnotationPatch(pod.UID, changes)
	if err != nil {
		return nil, err
	}
	var patched *corev1.Pod
	err = retry.OnError(retry.DefaultBackoff, Transient, func() error {
		patched, err = c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: fieldManager})
		return err
	})
	return patched, err
}

// Transient: an error the same request may not meet again.
func Transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// DeletePod deletes pod (that one: its UID is a precondition) with its
// default grace period; gone already is no error.
func DeletePod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) error {
	opts := metav1.DeleteOptions{}
	if pod.UID != "" {
		opts.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))
	}
	err := retry.OnError(retry.DefaultBackoff, Transient, func() error {
		return c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// WaitGone waits until pod is gone (or another has its name), at most
// timeout; it reports whether it went.
func WaitGone(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) (bool, error) {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, nil
		}
		return pod.UID != "" && cur.UID != pod.UID, nil
	})
	if wait.Interrupted(err) {
		return false, nil
	}
	return err == nil, err
}

// PodEvent is a pod as WatchPod last saw it.
type PodEvent struct {
	Name string
	Pod  *corev1.Pod // nil: there is no such pod
	Err  error       // the watch cannot go on
}

// WatchPod sends pod ns/name to out as it is now, then each time it
// changes, until ctx ends: a list then a watch from the list's version,
// with the field selector metadata.name (and the name checked, as the
// fake clientset does not select), listed again whenever the watch ends.
func WatchPod(ctx context.Context, c kubernetes.Interface, ns, name string, out chan<- PodEvent) {
	pods := c.CoreV1().Pods(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	send := func(e PodEvent) bool {
		select {
		case out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 10 * time.Second, Steps: 1 << 30}
	again := func(err error) bool {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			send(PodEvent{Name: name, Err: err})
			return false
		}
		select {
		case <-time.After(backoff.Step()):
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			if !again(err) {
				return
			}
			continue
		}
		var pod *corev1.Pod
		for i := range list.Items {
			if list.Items[i].Name == name {
				pod = &list.Items[i]
			}
		}
		if !send(PodEvent{Name: name, Pod: pod}) {
			return
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			if !again(err) {
				return
			}
			continue
		}
		err = follow(ctx, w, name, send)
		w.Stop()
		expired := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		if err != nil && !expired && !again(err) {
			return
		}
	}
}

// follow sends the pod's changes until the watch ends (an error
// event's error) or ctx does.
func follow(ctx context.Context, w watch.Interface, name string, send func(PodEvent) bool) error {
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
			if !ok {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
		switch ev.Type {
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		case watch.Added, watch.Modified, watch.Deleted:
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || pod.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				pod = nil
			}
			if !send(PodEvent{Name: name, Pod: pod}) {
				return nil
			}
		}
	}
}

// ConditionPatch is a strategic merge patch of a pod's status setting
// cond (conditions merge by type), the pod's UID a precondition.
func ConditionPatch(uid types.UID, cond corev1.PodCondition) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
}

// RandomName is prefix (cut to fit) followed by five random characters
// of [a-z0-9], at most 63 in all: what the API server's generateName
// makes, chosen here so that the caller knows the name before the
// create (and a fake client, which does not generate names, works).
func RandomName(prefix string) string {
	const maxPrefix = 63 - 5
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix + utilrand.String(5)
}
