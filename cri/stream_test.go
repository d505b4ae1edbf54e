package cri_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Each Stream* RPC returns the same items as its List* twin.
func TestStreamListsMatchLists(t *testing.T) {
	h := newHarness(t)
	h.seed()
	h.ctrd.AddImages(&runtimeapi.Image{Id: "sha256:a", RepoTags: []string{"a:1"}})
	h.vm.AddImages(&runtimeapi.Image{Id: "sha256:b", RepoTags: []string{"b:1"}})
	c := ctx(t)
	tests := []struct {
		name         string
		list, stream func(t *testing.T) []proto.Message
	}{
		{
			"pods",
			func(t *testing.T) []proto.Message {
				r, err := h.rs.ListPodSandbox(c, &runtimeapi.ListPodSandboxRequest{})
				return must(t, err, r.GetItems())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.rs.StreamPodSandboxes(c, &runtimeapi.StreamPodSandboxesRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes)
			},
		},
		{
			"containers",
			func(t *testing.T) []proto.Message {
				r, err := h.rs.ListContainers(c, &runtimeapi.ListContainersRequest{})
				return must(t, err, r.GetContainers())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.rs.StreamContainers(c, &runtimeapi.StreamContainersRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamContainersResponse).GetContainers)
			},
		},
		{
			"container stats",
			func(t *testing.T) []proto.Message {
				r, err := h.rs.ListContainerStats(c, &runtimeapi.ListContainerStatsRequest{})
				return must(t, err, r.GetStats())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.rs.StreamContainerStats(c, &runtimeapi.StreamContainerStatsRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
			},
		},
		{
			"pod stats",
			func(t *testing.T) []proto.Message {
				r, err := h.rs.ListPodSandboxStats(c, &runtimeapi.ListPodSandboxStatsRequest{})
				return must(t, err, r.GetStats())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.rs.StreamPodSandboxStats(c, &runtimeapi.StreamPodSandboxStatsRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
			},
		},
		{
			"pod metrics",
			func(t *testing.T) []proto.Message {
				r, err := h.rs.ListPodSandboxMetrics(c, &runtimeapi.ListPodSandboxMetricsRequest{})
				return must(t, err, r.GetPodMetrics())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.rs.StreamPodSandboxMetrics(c, &runtimeapi.StreamPodSandboxMetricsRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
			},
		},
		{
			"images",
			func(t *testing.T) []proto.Message {
				r, err := h.is.ListImages(c, &runtimeapi.ListImagesRequest{})
				return must(t, err, r.GetImages())
			},
			func(t *testing.T) []proto.Message {
				s, err := h.is.StreamImages(c, &runtimeapi.StreamImagesRequest{})
				return flatten(t, err, s, (*runtimeapi.StreamImagesResponse).GetImages)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, stream := tt.list(t), tt.stream(t)
			if len(list) < 2 {
				t.Fatalf("List returned %d items; the test needs items of both runtimes", len(list))
			}
			if len(list) != len(stream) {
				t.Fatalf("List returned %d items, Stream %d", len(list), len(stream))
			}
			for i := range list {
				if !proto.Equal(list[i], stream[i]) {
					t.Errorf("item %d: List %v, Stream %v", i, list[i], stream[i])
				}
			}
		})
	}
}

func must[T proto.Message](t *testing.T, err error, items []T) []proto.Message {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]proto.Message, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

func flatten[R any, T proto.Message](t *testing.T, err error, s grpc.ServerStreamingClient[R], items func(*R) []T) []proto.Message {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []proto.Message
	for _, page := range recvAll(t, s) {
		out = append(out, must(t, nil, items(page))...)
	}
	return out
}

// Stream* lists page large lists: every item exactly once, no page empty
// or over the page size.
func TestStreamPages(t *testing.T) {
	h := newHarness(t)
	const n, pageMax = 1234, 500
	for i := range n {
		h.ctrd.AddSandboxes(&runtimeapi.PodSandbox{Id: fmt.Sprintf("p%04d", i)})
	}
	h.vm.AddSandboxes(&runtimeapi.PodSandbox{Id: "p1"})
	s, err := h.rs.StreamPodSandboxes(ctx(t), &runtimeapi.StreamPodSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	pages := recvAll(t, s)
	for i, page := range pages {
		if len(page.PodSandboxes) == 0 || len(page.PodSandboxes) > pageMax {
			t.Errorf("page %d has %d items, want 1..%d", i, len(page.PodSandboxes), pageMax)
		}
		for _, sb := range page.PodSandboxes {
			if seen[sb.Id] {
				t.Errorf("%s sent twice", sb.Id)
			}
			seen[sb.Id] = true
		}
	}
	if len(seen) != n+1 || !seen["vm--p1"] {
		t.Errorf("streamed %d distinct pods in %d pages, want %d with vm--p1", len(seen), len(pages), n+1)
	}
}
