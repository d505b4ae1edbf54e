package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// The VM verbs (start, stop, pause, resume, hibernate, reboot, snapshot,
// snapshot delete, restore) are thin clients of the node agent's annotations (nodeagent/
// doc.go): each sets one request annotation on the pod and waits until
// the agent on the pod's node answers it in a result annotation.

// request is one request of a VM pod: the annotation set, and how its
// answer reads.
type request struct {
	verb       string // as the user typed it
	key, value string // the request annotation
	// answer reads the pod's result annotations: the outcome once there
	// is one (done), and whether it failed.
	answer func(a map[string]string) (outcome string, failed, done bool)
}

// powerStates are the verbs that declare crimux.io/power-state.
var powerStates = map[string]string{"start": "Running", "resume": "Running", "stop": "Shutdown", "pause": "Paused", "hibernate": "Hibernate"}

// powerRequest declares state; it is answered once the VM is observed in
// it, or the agent says why it was not applied.
func powerRequest(verb, state string) request {
	return request{verb: verb, key: kubeapi.AnnotationPowerState, value: state, answer: func(a map[string]string) (string, bool, bool) {
		if why := a[kubeapi.AnnotationPowerStateError]; strings.HasPrefix(why, kubeapi.AnnotationPowerState+": "+state+": ") {
			return why, true, true
		}
		if a[kubeapi.AnnotationObservedPowerState] == state {
			return "power state " + state, false, true
		}
		return "", false, false
	}}
}

// resultRequest sets key to value; the agent answers in result with
// "<value>: <outcome>", "<value>: failed: <why>" on failure.
func resultRequest(verb, key, value, result string) request {
	return request{verb: verb, key: key, value: value, answer: func(a map[string]string) (string, bool, bool) {
		outcome, ok := strings.CutPrefix(a[result], value+": ")
		if !ok {
			return "", false, false
		}
		return outcome, strings.HasPrefix(outcome, "failed"), true
	}}
}

// newRequest is the request verb args ask for.
func newRequest(verb string, args []string) (request, []string, error) {
	if state, ok := powerStates[verb]; ok {
		return powerRequest(verb, state), args, nil
	}
	switch verb {
	case "reboot":
		return resultRequest(verb, kubeapi.AnnotationRebootRequest, rebootToken(), kubeapi.AnnotationRebootResult), args, nil
	case "snapshot", "restore":
		if len(args) != 2 {
			return request{}, nil, fmt.Errorf("%s takes a pod and a snapshot name, got %d arguments: kubectl crimux %s POD NAME", verb, len(args), verb)
		}
		key, result := kubeapi.AnnotationSnapshotRequest, kubeapi.AnnotationSnapshotResult
		if verb == "restore" {
			key, result = kubeapi.AnnotationRestoreRequest, kubeapi.AnnotationRestoreResult
		}
		return resultRequest(verb, key, args[1], result), args[:1], nil
	case "snapshot delete":
		if len(args) != 2 {
			return request{}, nil, fmt.Errorf("%s takes a pod and a snapshot name, got %d arguments: kubectl crimux %s POD NAME", verb, len(args), verb)
		}
		return deleteRequest(args[1]), args[:1], nil
	}
	return request{}, nil, fmt.Errorf("unknown command %q", verb)
}

// rebootToken is a reboot-request value no earlier request had.
func rebootToken() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

// fieldManager is the plugin's name in the objects' managed fields.
const fieldManager = "kubectl-crimux"

// errAlreadyAsked: a snapshot, restore or delete of that name was asked
// for before; the agent does each name once.
var errAlreadyAsked = errors.New("was asked for before: the node agent does each name once; name a new one")

// send sets r on pod ns/name and waits, at most timeout, for its answer,
// which it prints.
func (r request) send(ctx context.Context, c kubernetes.Interface, ns, name string, timeout time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if r.key != kubeapi.AnnotationPowerState && r.key != kubeapi.AnnotationRebootRequest && pod.Annotations[r.key] == r.value {
		err := fmt.Errorf("%s %s of pod %s/%s %w", r.verb, r.value, ns, name, errAlreadyAsked)
		if outcome, _, done := r.answer(pod.Annotations); done {
			err = fmt.Errorf("%w (its answer: %s)", err, outcome)
		}
		return err
	}
	if _, err := kubeclient.PatchAnnotations(ctx, c, fieldManager, pod, map[string]*string{r.key: &r.value}); err != nil {
		return fmt.Errorf("pod %s/%s: set %s: %w", ns, name, r.key, err)
	}
	outcome, err := r.wait(ctx, c, pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %s=%s set, but %w", ns, name, r.key, r.value, err)
	}
	fmt.Fprintf(stdout, "pod %s/%s: %s\n", ns, name, outcome)
	return nil
}

// wait watches pod until its node agent answers r.
func (r request) wait(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) (string, error) {
	events := make(chan kubeclient.PodEvent)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go kubeclient.WatchPod(wctx, c, pod.Namespace, pod.Name, events)
	for {
		select {
		case <-ctx.Done():
			node := pod.Spec.NodeName
			if node == "" {
				node = "the pod's node (none yet)"
			}
			return "", fmt.Errorf("the node agent on %s did not answer in time (is crimux's node agent on there?)", node)
		case ev := <-events:
			switch {
			case ev.Err != nil:
				return "", ev.Err
			case ev.Pod == nil || ev.Pod.UID != pod.UID:
				return "", errors.New("the pod was deleted")
			}
			if outcome, failed, done := r.answer(ev.Pod.Annotations); done {
				if failed {
					return "", errors.New(outcome)
				}
				return outcome, nil
			}
		}
	}
}
