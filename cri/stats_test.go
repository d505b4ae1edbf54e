package cri_test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Stats lists filtered by an ID ask only its owner.
func TestStatsFilters(t *testing.T) {
	h := newHarness(t)
	h.seed()
	tests := []struct {
		name  string
		call  func() ([]string, error)
		want  []string
		asked string
	}{
		{"container stats, unfiltered", func() ([]string, error) {
			r, err := h.rs.ListContainerStats(ctx(t), &runtimeapi.ListContainerStatsRequest{})
			return statIDs(r.GetStats()), err
		}, []string{"c1", "c2", "vm--c1"}, "both"},
		{"container stats of a vm pod", func() ([]string, error) {
			r, err := h.rs.ListContainerStats(ctx(t), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: "vm--p1"}})
			return statIDs(r.GetStats()), err
		}, []string{"vm--c1"}, "vm"},
		{"container stats of a containerd container", func() ([]string, error) {
			r, err := h.rs.ListContainerStats(ctx(t), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{Id: "c2"}})
			return statIDs(r.GetStats()), err
		}, []string{"c2"}, "ctrd"},
		{"pod stats of a vm pod", func() ([]string, error) {
			r, err := h.rs.ListPodSandboxStats(ctx(t), &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: "vm--p1"}})
			var ids []string
			for _, s := range r.GetStats() {
				ids = append(ids, s.Attributes.Id)
				ids = append(ids, statIDs(s.GetLinux().GetContainers())...)
			}
			return ids, err
		}, []string{"vm--p1", "vm--c1"}, "vm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.ctrd.ResetCalls()
			h.vm.ResetCalls()
			got, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			if !sameIDs(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			method := "ListContainerStats"
			if strings.HasPrefix(tt.name, "pod") {
				method = "ListPodSandboxStats"
			}
			checkAsked(t, h, method, tt.asked)
		})
	}
}

func statIDs(stats []*runtimeapi.ContainerStats) []string {
	var ids []string
	for _, s := range stats {
		ids = append(ids, s.GetAttributes().GetId())
	}
	return ids
}
