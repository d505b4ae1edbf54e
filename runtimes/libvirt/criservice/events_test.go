package criservice

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// followEvents runs GetContainerEvents on a recording stream until the
// test ends; it returns once the stream is subscribed (a probe published
// reached it), with the probes dropped.
func followEvents(t *testing.T, s *Service) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := &eventStream{ctx: ctx}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("GetContainerEvents: %v", err)
		}
	})
	probe := &runtimeapi.ContainerEventResponse{ContainerId: "probe"}
	coretest.WaitFor(t, "the event stream to subscribe", func() bool {
		s.Events.Publish(probe)
		return len(st.events()) > 0
	})
	time.Sleep(5 * time.Millisecond) // probes published meanwhile land before they are dropped
	st.mu.Lock()
	st.sent = nil
	st.mu.Unlock()
	return st
}

// TestGetContainerEvents: a VM's life, as kubelet's evented PLEG sees it.
func TestGetContainerEvents(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	st := followEvents(t, s)
	cfg := podConfig(t, "web")
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(128, 0, 0))
	startVM(t, s, id)
	if _, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	want := []runtimeapi.ContainerEventType{
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
	}
	coretest.WaitFor(t, "the VM's events", func() bool { return len(st.events()) >= len(want) })
	got := st.events()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %v", len(got), len(want), got)
	}
	for i, ev := range got {
		if ev.ContainerEventType != want[i] || ev.ContainerId != id || ev.CreatedAt == 0 {
			t.Fatalf("event %d: %s of %s, want %s of %s", i, ev.ContainerEventType, ev.ContainerId, want[i], id)
		}
		if ev.GetPodSandboxStatus().GetId() != sb {
			t.Fatalf("event %d without its pod's status: %v", i, ev.PodSandboxStatus)
		}
	}
	if sts := got[0].ContainersStatuses; len(sts) != 1 || sts[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("CREATED event statuses %v, want the VM CREATED", sts)
	}
	if sts := got[1].ContainersStatuses; len(sts) != 1 || sts[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("STARTED event statuses %v, want the VM RUNNING", sts)
	}
	if sts := got[2].ContainersStatuses; len(sts) != 1 || sts[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("STOPPED event statuses %v, want the VM EXITED", sts)
	}
	if sts := got[3].ContainersStatuses; len(sts) != 0 {
		t.Fatalf("DELETED event statuses %v, want none (the container is gone)", sts)
	}
}

// TestStoppedEventCarriesTheExit: the STOPPED event's container status
// is the exited one, with its exit code, whatever stopped the VM.
func TestStoppedEventCarriesTheExit(t *testing.T) {
	s, _ := newService(t)
	_, id := runningVM(t, s, "web")
	st := followEvents(t, s)
	if _, err := s.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	coretest.WaitFor(t, "the STOPPED event", func() bool { return len(st.events()) > 0 })
	ev := st.events()[0]
	if ev.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || len(ev.ContainersStatuses) != 1 {
		t.Fatalf("event %v", ev)
	}
	got := ev.ContainersStatuses[0]
	if got.State != runtimeapi.ContainerState_CONTAINER_EXITED || got.Reason != "Killed" || got.ExitCode != 137 || got.FinishedAt == 0 {
		t.Fatalf("STOPPED event status: %s exit %d %q, want EXITED 137 Killed", got.State, got.ExitCode, got.Reason)
	}
}

// TestGetContainerEventsEnds: the stream ends with its context, or with
// the error of a send.
func TestGetContainerEventsEnds(t *testing.T) {
	s, _ := newService(t)
	st := &eventStream{ctx: context.Background(), fail: errors.New("client gone")}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
	var err error
	coretest.WaitFor(t, "GetContainerEvents to end on a failed send", func() bool {
		s.Events.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "x"})
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err == nil || err.Error() != "client gone" {
		t.Fatalf("GetContainerEvents = %v, want the send's error", err)
	}
}
