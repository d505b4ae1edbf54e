package cri_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
)

// GetContainerEvents merges the event streams of both runtimes, the VM
// runtime's IDs prefixed.
func TestGetContainerEventsMerges(t *testing.T) {
	h := newHarness(t)
	h.ctrd.SetEvents(
		&runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT},
		&runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
	)
	h.vm.SetEvents(&runtimeapi.ContainerEventResponse{
		ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: "p1"}, ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "c1"}},
	})
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.rs.GetContainerEvents(c, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("Recv after %v: %v", got, err)
		}
		got = append(got, ev.ContainerId+" "+ev.ContainerEventType.String())
		if strings.HasPrefix(ev.ContainerId, "vm--") && (ev.PodSandboxStatus.GetId() != "vm--p1" || ev.ContainersStatuses[0].Id != "vm--c1") {
			t.Errorf("vm event not prefixed throughout: %v", ev)
		}
	}
	sort.Strings(got)
	want := []string{"c1 CONTAINER_CREATED_EVENT", "c1 CONTAINER_STARTED_EVENT", "vm--c1 CONTAINER_STARTED_EVENT"}
	if !sameIDs(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// A runtime's event stream that breaks is reopened; the client's stream
// carries on.
func TestGetContainerEventsSurvivesRuntimeRestart(t *testing.T) {
	h := newHarness(t)
	h.vm.SetEvents(&runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT})
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.rs.GetContainerEvents(c, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Recv(); err != nil || ev.ContainerId != "vm--c1" {
		t.Fatalf("first event = %v, %v", ev, err)
	}
	h.stopVM()
	h.vmSrv = crifake.Serve(t, h.vm, h.vmSrv.Path)
	ev, err := s.Recv()
	if err != nil || ev.ContainerId != "vm--c1" {
		t.Fatalf("event after the vm runtime restarted = %v, %v", ev, err)
	}
}

// Clients coming and going while both runtimes send events: every event
// reaches a client that stays, and nothing races (run with -race).
func TestGetContainerEventsUnderLoad(t *testing.T) {
	h := newHarness(t)
	const perRuntime = 200
	open := func(c context.Context) runtimeapi.RuntimeService_GetContainerEventsClient {
		s, err := h.rs.GetContainerEvents(c, &runtimeapi.GetEventsRequest{})
		if err != nil {
			t.Error(err)
			return nil
		}
		return s
	}
	waitListeners := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for h.ctrd.EventListeners() < n || h.vm.EventListeners() < n {
			if time.Now().After(deadline) {
				t.Fatalf("runtimes have %d and %d event listeners, want %d", h.ctrd.EventListeners(), h.vm.EventListeners(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stay := open(c)
	if stay == nil {
		t.FailNow()
	}
	waitListeners(1)

	// Clients that leave mid-stream.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				lc, lcancel := context.WithTimeout(c, 50*time.Millisecond)
				if s := open(lc); s != nil {
					_, _ = s.Recv() // an event, or the client leaves before one comes
				}
				lcancel()
			}
		}()
	}
	for _, f := range []*crifake.Fake{h.ctrd, h.vm} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perRuntime {
				f.Emit(&runtimeapi.ContainerEventResponse{ContainerId: "c1", CreatedAt: int64(i)})
			}
		}()
	}
	got := map[string]int{}
	for n := 0; n < 2*perRuntime; n++ {
		ev, err := stay.Recv()
		if err != nil {
			t.Fatalf("Recv after %d events: %v", n, err)
		}
		got[ev.ContainerId]++
	}
	wg.Wait()
	if got["c1"] != perRuntime || got["vm--c1"] != perRuntime {
		t.Errorf("received %v, want %d of each runtime", got, perRuntime)
	}
}
