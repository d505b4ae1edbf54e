package nodeagent

import (
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

func TestGuestBootEvents(t *testing.T) {
	kube := &fakeKube{}
	a, err := newAgent(nil, kube, Options{Node: "n1", StateDir: t.TempDir(), VMs: newFakeVMs(vmv1.PowerState_POWER_STATE_RUNNING), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pod := PodRef{Namespace: "ns", Name: "vm", UID: "u1"}
	a.GuestBoot(pod, false, "no sign")
	a.GuestBoot(pod, true, "late")
	want := map[event]bool{
		{corev1.EventTypeWarning, ReasonGuestNotBooted, "no sign"}: true,
		{corev1.EventTypeNormal, ReasonGuestBooted, "late"}:        true,
	}
	deadline := time.Now().Add(5 * time.Second)
	var got []event
	for len(got) < len(want) && time.Now().Before(deadline) {
		_, evs := kube.take()
		got = append(got, evs...)
		time.Sleep(time.Millisecond)
	}
	if len(got) != len(want) || !want[got[0]] || !want[got[1]] || got[0] == got[1] {
		t.Fatalf("events %+v, want %v", got, want)
	}
}
