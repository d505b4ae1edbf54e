package cri_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (h *harness) listSandboxes(t *testing.T, f *runtimeapi.PodSandboxFilter) ([]string, error) {
	t.Helper()
	resp, err := h.rs.ListPodSandbox(ctx(t), &runtimeapi.ListPodSandboxRequest{Filter: f})
	return sandboxIDs(resp.GetItems()), err
}

func (h *harness) listContainers(t *testing.T, f *runtimeapi.ContainerFilter) ([]string, error) {
	t.Helper()
	resp, err := h.rs.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{Filter: f})
	return containerIDs(resp.GetContainers()), err
}

var (
	ready   = &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	running = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
)

func TestListMerge(t *testing.T) { forEachVMBackend(t, testListMerge) }

func testListMerge(t *testing.T, newH func(*testing.T, time.Duration) *harness) {
	h := newH(t, 5*time.Second)
	h.seed()
	sandboxTests := []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
		asked  string // "both", "ctrd" or "vm": which runtimes were asked
	}{
		{"unfiltered", nil, []string{"p1", "p2", "vm--p1"}, "both"},
		{"by vm ID", &runtimeapi.PodSandboxFilter{Id: "vm--p1"}, []string{"vm--p1"}, "vm"},
		{"by containerd ID", &runtimeapi.PodSandboxFilter{Id: "p1"}, []string{"p1"}, "ctrd"},
		{"by state", &runtimeapi.PodSandboxFilter{State: ready}, []string{"p1", "vm--p1"}, "both"},
		{"by label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "vm"}}, []string{"vm--p1"}, "both"},
	}
	for _, tt := range sandboxTests {
		t.Run("ListPodSandbox/"+tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			got, err := h.listSandboxes(t, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if !sameIDs(got, tt.want) {
				t.Errorf("ListPodSandbox = %v, want %v", got, tt.want)
			}
			checkAsked(t, h, "ListPodSandbox", tt.asked)
			if c, ok := h.vm.LastCall("ListPodSandbox"); ok && tt.filter.GetId() != "" {
				if id := c.Request.(*runtimeapi.ListPodSandboxRequest).Filter.Id; id != "p1" {
					t.Errorf("vm saw filter id %q, want p1", id)
				}
			}
		})
	}
	containerTests := []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
		asked  string
	}{
		{"unfiltered", nil, []string{"c1", "c2", "vm--c1"}, "both"},
		{"by vm ID", &runtimeapi.ContainerFilter{Id: "vm--c1"}, []string{"vm--c1"}, "vm"},
		{"by containerd ID", &runtimeapi.ContainerFilter{Id: "c2"}, []string{"c2"}, "ctrd"},
		{"by vm pod", &runtimeapi.ContainerFilter{PodSandboxId: "vm--p1"}, []string{"vm--c1"}, "vm"},
		{"by containerd pod", &runtimeapi.ContainerFilter{PodSandboxId: "p1"}, []string{"c1"}, "ctrd"},
		{"by state", &runtimeapi.ContainerFilter{State: running}, []string{"c1", "vm--c1"}, "both"},
	}
	for _, tt := range containerTests {
		t.Run("ListContainers/"+tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			got, err := h.listContainers(t, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if !sameIDs(got, tt.want) {
				t.Errorf("ListContainers = %v, want %v", got, tt.want)
			}
			checkAsked(t, h, "ListContainers", tt.asked)
		})
	}
	t.Run("vm container's pod ID is prefixed too", func(t *testing.T) {
		resp, err := h.rs.ListContainers(ctx(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "vm--c1"}})
		if err != nil || len(resp.Containers) != 1 {
			t.Fatalf("ListContainers = %v, %v", resp, err)
		}
		if c := resp.Containers[0]; c.PodSandboxId != "vm--p1" || c.ImageRef != "sha256:disk" {
			t.Errorf("container = %v, want pod vm--p1 and image_ref untouched", c)
		}
	})
}

// checkAsked checks which runtimes got method.
func checkAsked(t *testing.T, h *harness, method, asked string) {
	t.Helper()
	gotCtrd, gotVM := len(h.ctrd.Calls(method)) > 0, len(h.vm.Calls(method)) > 0
	wantCtrd, wantVM := asked == "both" || asked == "ctrd", asked == "both" || asked == "vm"
	if gotCtrd != wantCtrd || gotVM != wantVM {
		t.Errorf("%s asked containerd=%v vm=%v, want %s", method, gotCtrd, gotVM, asked)
	}
}

// A runtime that goes down must not make its pods vanish from lists:
// its last known items are served, filtered like fresh ones.
func TestListServesLastKnownItemsWhenRuntimeDown(t *testing.T) {
	forEachVMBackend(t, testListServesLastKnownItemsWhenRuntimeDown)
}

func testListServesLastKnownItemsWhenRuntimeDown(t *testing.T, newH func(*testing.T, time.Duration) *harness) {
	h := newH(t, 5*time.Second)
	h.seed()
	// A filtered list first: it must not become the cache.
	if _, err := h.listSandboxes(t, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "none"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.listSandboxes(t, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.listContainers(t, nil); err != nil {
		t.Fatal(err)
	}
	h.stopVM()
	// containerd's answers stay fresh.
	h.ctrd.AddSandboxes(&runtimeapi.PodSandbox{Id: "p3", State: runtimeapi.PodSandboxState_SANDBOX_READY})

	sandboxTests := []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"unfiltered", nil, []string{"p1", "p2", "p3", "vm--p1"}},
		{"by vm ID", &runtimeapi.PodSandboxFilter{Id: "vm--p1"}, []string{"vm--p1"}},
		{"by unknown vm ID", &runtimeapi.PodSandboxFilter{Id: "vm--p9"}, nil},
		{"by label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "vm"}}, []string{"vm--p1"}},
		{"by other label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}, []string{"p1"}},
		{"by state", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}, []string{"p2"}},
	}
	for _, tt := range sandboxTests {
		t.Run("ListPodSandbox/"+tt.name, func(t *testing.T) {
			got, err := h.listSandboxes(t, tt.filter)
			if err != nil {
				t.Fatalf("ListPodSandbox with vm down: %v", err)
			}
			if !sameIDs(got, tt.want) {
				t.Errorf("ListPodSandbox = %v, want %v", got, tt.want)
			}
		})
	}
	containerTests := []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"unfiltered", nil, []string{"c1", "c2", "vm--c1"}},
		{"by vm ID", &runtimeapi.ContainerFilter{Id: "vm--c1"}, []string{"vm--c1"}},
		{"by vm pod", &runtimeapi.ContainerFilter{PodSandboxId: "vm--p1"}, []string{"vm--c1"}},
		{"by state", &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}, []string{"c2"}},
	}
	for _, tt := range containerTests {
		t.Run("ListContainers/"+tt.name, func(t *testing.T) {
			got, err := h.listContainers(t, tt.filter)
			if err != nil {
				t.Fatalf("ListContainers with vm down: %v", err)
			}
			if !sameIDs(got, tt.want) {
				t.Errorf("ListContainers = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("Stream lists serve them too", func(t *testing.T) {
		s, err := h.rs.StreamPodSandboxes(ctx(t), &runtimeapi.StreamPodSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, page := range recvAll(t, s) {
			got = append(got, sandboxIDs(page.PodSandboxes)...)
		}
		if want := []string{"p1", "p2", "p3", "vm--p1"}; !sameIDs(got, want) {
			t.Errorf("StreamPodSandboxes = %v, want %v", got, want)
		}
	})
	t.Run("logged", func(t *testing.T) {
		if logs := h.logs.String(); !strings.Contains(logs, "last known items") || !strings.Contains(logs, "runtime=vm") {
			t.Errorf("serving cached items was not logged naming the runtime:\n%s", logs)
		}
	})
}

// Without a list to fall back on, the call fails (kubelet retries)
// rather than answer without the runtime's pods.
func TestListWithoutCacheFailsUnavailable(t *testing.T) {
	forEachVMBackend(t, testListWithoutCacheFailsUnavailable)
}

func testListWithoutCacheFailsUnavailable(t *testing.T, newH func(*testing.T, time.Duration) *harness) {
	h := newH(t, 5*time.Second)
	h.seed()
	h.stopVM()
	_, err := h.listSandboxes(t, nil)
	wantCode(t, err, codes.Unavailable, `"vm"`)
	_, err = h.listContainers(t, nil)
	wantCode(t, err, codes.Unavailable, `"vm"`)
	_, err = h.listSandboxes(t, &runtimeapi.PodSandboxFilter{Id: "vm--p1"})
	wantCode(t, err, codes.Unavailable, `"vm"`)
	s, err := h.rs.StreamContainers(ctx(t), &runtimeapi.StreamContainersRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.Unavailable, `"vm"`)
	// Lists owned by containerd alone still work.
	if got, err := h.listSandboxes(t, &runtimeapi.PodSandboxFilter{Id: "p1"}); err != nil || !sameIDs(got, []string{"p1"}) {
		t.Errorf("ListPodSandbox(p1) with vm down = %v, %v", got, err)
	}
}

// recvAll reads a server stream to its end.
func recvAll[T any](t *testing.T, s grpc.ServerStreamingClient[T]) []*T {
	t.Helper()
	var out []*T
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		out = append(out, m)
	}
}

// A VM runtime that hangs instead of going away must not take the node's
// pod list down with it: like a runtime that is down, it is answered from
// its last known items once its call times out. (Today only Unavailable
// falls back to the cache; a hang fails the whole list with
// DeadlineExceeded after call_timeout, 2m by default, and kubelet's PLEG
// relist with it.)
func TestListServesLastKnownItemsWhenRuntimeHangs(t *testing.T) {
	t.Parallel()
	forEachVMBackend(t, testListServesLastKnownItemsWhenRuntimeHangs)
}

func testListServesLastKnownItemsWhenRuntimeHangs(t *testing.T, newH func(*testing.T, time.Duration) *harness) {
	h := newH(t, time.Second)
	h.seed()
	if _, err := h.listSandboxes(t, nil); err != nil {
		t.Fatal(err)
	}
	h.vm.Handle("ListPodSandbox", func(c context.Context, _ proto.Message) (proto.Message, error) {
		<-c.Done() // hung: answers only when the caller gives up
		return nil, c.Err()
	})
	start := time.Now()
	got, err := h.listSandboxes(t, nil)
	if err != nil {
		t.Fatalf("ListPodSandbox with the vm runtime hung = %v after %v, want its last known items", err, time.Since(start).Round(time.Millisecond))
	}
	if want := []string{"p1", "p2", "vm--p1"}; !sameIDs(got, want) {
		t.Errorf("ListPodSandbox = %v, want %v", got, want)
	}
}

// The primary's answers are passed through undecoded (list_raw.go); when
// the primary goes away its last unfiltered answer is decoded, filtered
// and served, merged with the other runtimes' fresh items.
func TestListServesPrimaryLastKnownItemsWhenItIsDown(t *testing.T) {
	h := newHarness(t)
	h.seed()
	if _, err := h.listSandboxes(t, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "none"}}); err != nil {
		t.Fatal(err) // filtered: must not become the cache
	}
	if _, err := h.listSandboxes(t, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.listContainers(t, nil); err != nil {
		t.Fatal(err)
	}
	h.ctrdSrv.Stop()
	h.vm.AddSandboxes(&runtimeapi.PodSandbox{Id: "p7", Metadata: podMeta("new-vm"), State: runtimeapi.PodSandboxState_SANDBOX_READY})

	if got, err := h.listSandboxes(t, nil); err != nil || !sameIDs(got, []string{"p1", "p2", "vm--p1", "vm--p7"}) {
		t.Errorf("ListPodSandbox with containerd down = %v, %v; want its last known pods and the VM runtime's", got, err)
	}
	notReady := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
	if got, err := h.listSandboxes(t, notReady); err != nil || !sameIDs(got, []string{"p2"}) {
		t.Errorf("ListPodSandbox(NOTREADY) with containerd down = %v, %v; want [p2]", got, err)
	}
	if got, err := h.listContainers(t, nil); err != nil || !sameIDs(got, []string{"c1", "c2", "vm--c1"}) {
		t.Errorf("ListContainers with containerd down = %v, %v", got, err)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "last known items") || !strings.Contains(logs, "runtime=containerd") {
		t.Errorf("serving containerd's cached items was not logged naming it:\n%s", logs)
	}
}
