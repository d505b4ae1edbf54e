package gc

import (
	"context"
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestCollectorCNIGCNamesEveryLiveAttachment: a pass's GC names the VM
// pods whose network is not down, every namespace in the netns dir (this
// instance's and other instances'), and the other runtimes' pods; a pod
// whose DEL succeeded is left out, so whatever a plugin still holds for
// it goes.
func TestCollectorCNIGCNamesEveryLiveAttachment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, f := e.gc, e.Net
	e.PutPod(t, "up", nil)
	e.PutPod(t, "creating", func(sb *store.Sandbox) { sb.Creating = true })
	e.PutPod(t, "down", func(sb *store.Sandbox) {
		sb.State, sb.NetDown = runtimeapi.PodSandboxState_SANDBOX_NOTREADY, true
	})
	f.Own = map[string]string{"up": "/x/i_up"}
	f.Foreign = []string{"other_abc", "not-a-pod-namespace"}
	r.Networks.Peers = func(context.Context) ([]string, error) { return []string{"ctr1"}, nil }
	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if len(f.GCLists) != 1 {
		t.Fatalf("GC calls %v, want one", f.GCLists)
	}
	got := slices.Compact(f.GCLists[0])
	if want := []string{"abc", "creating", "ctr1", "up"}; !slices.Equal(got, want) {
		t.Fatalf("GC named %v, want %v", got, want)
	}
}

// TestCollectorCNIGCNeedsTheWholeList: when the other runtimes' pods
// cannot be listed, or libvirt was not asked, no GC runs.
func TestCollectorCNIGCNeedsTheWholeList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, f := e.gc, e.Net
	e.PutPod(t, "up", nil)
	var rep GCReport
	r.collectNetworks(&rep, false, false)
	r.Networks.Peers = func(context.Context) ([]string, error) { return nil, errors.New("containerd down") }
	r.collectNetworks(&rep, false, true)
	if len(f.GCLists) != 0 {
		t.Fatalf("GC ran with a partial list: %v", f.GCLists)
	}
}
