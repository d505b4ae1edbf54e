package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Event reasons of a VM pod's guest boot (crimux's boot watch): Warning
// GuestNotBooted when the guest showed no sign of an operating system in
// time ([libvirt] guest_boot_timeout), Normal GuestBooted if it shows
// itself later.
const (
	ReasonGuestNotBooted = "GuestNotBooted"
	ReasonGuestBooted    = "GuestBooted"
)

// guestBootEventTimeout bounds one event's write: an API server away
// loses the event (as kubelet's recorder would), never blocks the VM
// runtime.
const guestBootEventTimeout = 10 * time.Second

// PodRef names a pod: what the VM runtime knows of it.
type PodRef struct {
	Namespace, Name string
	UID             types.UID
}

// GuestBoot records the event of a VM pod's guest boot on the pod; it
// returns at once (the write runs on its own).
func (a *Agent) GuestBoot(pod PodRef, booted bool, message string) {
	eventType, reason := corev1.EventTypeWarning, ReasonGuestNotBooted
	if booted {
		eventType, reason = corev1.EventTypeNormal, ReasonGuestBooted
	}
	a.PodEvent(pod, eventType, reason, message)
}

// PodEvent records an event of the VM runtime's on a pod (how its VM
// started); it returns at once.
func (a *Agent) PodEvent(pod PodRef, eventType, reason, message string) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guestBootEventTimeout)
		defer cancel()
		if err := a.rec.kube.recordEvent(ctx, p, eventType, reason, message); err != nil {
			a.log.Warn("node agent: event not recorded", "reason", reason, "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}()
}
