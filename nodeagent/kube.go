package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crimux/crimux/kubeapi"
)

// Who the agent's events say reported them.
const (
	eventComponent  = "crimux"
	eventController = "crimux.io/node-agent"
)

// kubeWriter is every write the agent makes to the API server.
type kubeWriter interface {
	// patchAnnotations sets the annotations of changes on pod (a nil
	// value removes the key) and returns the pod's resource version after
	// the patch.
	patchAnnotations(ctx context.Context, pod *corev1.Pod, changes map[string]*string) (string, error)
	// recordEvent records a core/v1 Event about pod.
	recordEvent(ctx context.Context, pod *corev1.Pod, eventType, reason, message string) error
}

// podWriter writes through the agent's core/v1 client.
type podWriter struct {
	client *coreClient
	node   string
	now    func() time.Time
}

// patchAnnotations sends a JSON merge patch of metadata.annotations. The
// patch carries the pod's UID too: UIDs are immutable, so the patch fails
// (Invalid) rather than land on a pod of the same name created since.
func (w podWriter) patchAnnotations(ctx context.Context, pod *corev1.Pod, changes map[string]*string) (string, error) {
	patch, err := kubeapi.AnnotationPatch(pod.UID, changes)
	if err != nil {
		return "", err
	}
	patched, err := w.client.mergePatchPod(ctx, pod.Namespace, pod.Name, patch)
	if err != nil {
		return "", fmt.Errorf("patch annotations of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return patched.ResourceVersion, nil
}

// recordEvent creates a core/v1 Event the way kubelet's recorder does
// (first and last timestamps, count 1), naming crimux as its source.
func (w podWriter) recordEvent(ctx context.Context, pod *corev1.Pod, eventType, reason, message string) error {
	now := metav1.NewTime(w.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
			Namespace: pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
		Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: eventComponent, Host: w.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: eventController, ReportingInstance: w.node,
	}
	if err := w.client.createEvent(ctx, ev); err != nil {
		return fmt.Errorf("record event %s on pod %s/%s: %w", reason, pod.Namespace, pod.Name, err)
	}
	return nil
}
