package kubeclient

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Events records events about objects, as kubectl describe shows them.
// An event is best effort: one that cannot be written is logged.
type Events struct {
	Client kubernetes.Interface
	// Component names the writer (the event's source and reporting
	// controller).
	Component string
	Log       *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Pod records an event about p.
func (e Events) Pod(p *corev1.Pod, typ, reason, msg string) {
	e.Record(corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}, typ, reason, msg)
}

// Node records an event about node n.
func (e Events) Node(n *corev1.Node, typ, reason, msg string) {
	e.Record(corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, typ, reason, msg)
}

// Record records an event about ref (a cluster-scoped object's in the
// default namespace, as kubelet's node events are).
func (e Events) Record(ref corev1.ObjectReference, typ, reason, msg string) {
	if e.Client == nil {
		return
	}
	clock := e.Now
	if clock == nil {
		clock = time.Now
	}
	now := metav1.NewTime(clock())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: ref, Reason: reason, Message: msg, Type: typ,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source:              corev1.EventSource{Component: e.Component},
		ReportingController: "crimux.io/" + e.Component, ReportingInstance: e.Component,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && e.Log != nil {
		e.Log.Warn("event not recorded", "object", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "reason", reason, "err", err)
	}
}
