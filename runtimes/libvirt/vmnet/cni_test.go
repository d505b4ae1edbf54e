package vmnet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestReadiness: CNI STATUS failing makes the network not ready, with
// the plugin's words, in the condition (false, NetworkPluginNotReady)
// and in the refusal of a new pod (FailedPrecondition); passing, or no
// network at all, it is ready.
func TestReadiness(t *testing.T) {
	ctx := context.Background()
	e := coretest.New(t)
	n := e.R.Networks
	e.Net.StatusErr = errors.New("plugin bridge failed (status): no host-local")
	if msg := n.NotReady(ctx); !strings.Contains(msg, "no host-local") {
		t.Fatalf("NotReady = %q, want the plugin's words", msg)
	}
	if err := n.RequireReady(ctx); errdefs.Code(err) != errdefs.Code(errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no host-local") {
		t.Fatalf("RequireReady = %v, want FailedPrecondition with the plugin's words", err)
	}
	c := n.Condition(ctx)
	if c.Type != runtimeapi.NetworkReady || c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, "no host-local") {
		t.Fatalf("Condition = %+v, want not ready with the plugin's words", c)
	}
	e.Net.StatusErr = nil
	if msg, err, c := n.NotReady(ctx), n.RequireReady(ctx), n.Condition(ctx); msg != "" || err != nil || !c.Status || c.Reason != "" {
		t.Fatalf("ready network: %q, %v, %+v", msg, err, c)
	}
	n = coretest.New(t, coretest.Options{NoNetwork: true}).R.Networks
	if msg, err, c := n.NotReady(ctx), n.RequireReady(ctx), n.Condition(ctx); msg != "" || err != nil || !c.Status {
		t.Fatalf("no network: %q, %v, %+v; want ready", msg, err, c)
	}
}

// TestLiveAttachments: every pod whose network is not known down, every
// namespace (this instance's, and another's by its sandbox), and the
// other runtimes' pods; nothing at all when a part cannot be listed.
func TestLiveAttachments(t *testing.T) {
	ctx := context.Background()
	e := coretest.New(t)
	n := e.R.Networks
	e.PutPod(t, "up", nil)
	e.PutPod(t, "planned", func(sb *store.Sandbox) { sb.Net.Ready = false })
	e.PutPod(t, "down", func(sb *store.Sandbox) { sb.NetDown = true })
	e.PutPod(t, "nonet", func(sb *store.Sandbox) { sb.Net = nil })
	e.Net.Own = map[string]string{"lost": "/x/i_lost"}
	e.Net.Foreign = []string{"other_abc", "not-a-pod-namespace"}
	n.Peers = func(context.Context) ([]string, error) { return []string{"ctr1"}, nil }
	ids, err := n.LiveAttachments(ctx)
	if got, want := slices.Sorted(slices.Values(ids)), []string{"abc", "ctr1", "lost", "planned", "up"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("LiveAttachments = %v, %v; want %v", got, err, want)
	}
	n.Peers = func(context.Context) ([]string, error) { return nil, errors.New("containerd down") }
	if ids, err := n.LiveAttachments(ctx); err == nil || !strings.Contains(err.Error(), "other runtimes") || ids != nil {
		t.Fatalf("LiveAttachments with the peers unlisted = %v, %v; want an error", ids, err)
	}
	n.Peers = nil
	n.Net = unlistedNet{e.Net}
	if ids, err := n.LiveAttachments(ctx); err == nil || !strings.Contains(err.Error(), "namespaces") || ids != nil {
		t.Fatalf("LiveAttachments with the namespaces unread = %v, %v; want an error", ids, err)
	}
}

// unlistedNet is a pod network whose namespaces cannot be read.
type unlistedNet struct{ *coretest.Net }

func (unlistedNet) Namespaces() (map[string]string, []string, error) {
	return nil, nil, errors.New("read netns dir: permission denied")
}
