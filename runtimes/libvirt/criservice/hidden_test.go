package criservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestPodStatsHideWhatCRIDoesNotSee: a pod still being made or being
// removed is in no stats, as in no list (found by the unit tests).
func TestPodStatsHideWhatCRIDoesNotSee(t *testing.T) {
	e := coretest.New(t)
	s := serviceOn(e)
	e.PutPod(t, "live", nil)
	e.PutPod(t, "making", func(sb *store.Sandbox) { sb.Creating = true })
	e.PutPod(t, "going", func(sb *store.Sandbox) { sb.Removing = true })
	list, err := s.ListPodSandboxStats(context.Background(), &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.GetStats()) != 1 || list.GetStats()[0].GetAttributes().GetId() != "live" {
		t.Fatalf("ListPodSandboxStats = %v, %v; want the live pod alone", list.GetStats(), err)
	}
	for _, id := range []string{"making", "going"} {
		if _, err := s.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id}); !errdefs.IsNotFound(err) {
			t.Errorf("PodSandboxStats(%s): %v, want NotFound", id, err)
		}
	}
}
