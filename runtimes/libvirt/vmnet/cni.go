package vmnet

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
)

// networkStatusTimeout bounds CNI STATUS (a plugin that hangs must not
// hang the Status call or a RunPodSandbox).
const networkStatusTimeout = 10 * time.Second

// NotReady asks the pod network whether new pods may join it (CNI
// STATUS; always ready for a network older than CNI 1.1, or none at
// all): "" when ready, else the message, naming the network and carrying
// the plugin's words.
func (r *Networks) NotReady(ctx context.Context) string {
	if r.Net == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, networkStatusTimeout)
	defer cancel()
	if err := r.Net.Status(ctx); err != nil {
		return err.Error()
	}
	return ""
}

// RequireReady refuses a new VM pod while its network is not
// ready (running VMs are not touched): FailedPrecondition, as the node
// is not in a state to run the pod, while the runtime itself is up
// (Unavailable would read as the runtime being down).
func (r *Networks) RequireReady(ctx context.Context) error {
	if msg := r.NotReady(ctx); msg != "" {
		return fmt.Errorf("%w: VM pod network: %s", errdefs.ErrFailedPrecondition, msg)
	}
	return nil
}

// LiveAttachments are the sandboxes whose attachment to the pod network
// must survive CNI GC: every VM pod record whose network is not known
// to be down (planned, up, or owed a DEL), every namespace in the netns
// dir, this instance's and other crimux instances' (whose pods share
// the network), and the pods of the other runtimes on the node (Peers).
// An error leaves GC out: a short list would release live addresses.
func (r *Networks) LiveAttachments(ctx context.Context) ([]string, error) {
	recs, err := r.Store.Sandboxes()
	if err != nil {
		return nil, fmt.Errorf("VM pod records: %w", err)
	}
	var ids []string
	for _, sb := range recs {
		if sb.Net != nil && !sb.NetDown {
			ids = append(ids, sb.ID)
		}
	}
	own, foreign, err := r.Net.Namespaces()
	if err != nil {
		return nil, fmt.Errorf("VM pod namespaces: %w", err)
	}
	for id := range own {
		ids = append(ids, id)
	}
	for _, name := range foreign {
		if _, id, err := podnet.SplitNamespace(name); err == nil {
			ids = append(ids, id)
		}
	}
	if r.Peers != nil {
		peers, err := r.Peers(ctx)
		if err != nil {
			return nil, fmt.Errorf("pods of the other runtimes: %w", err)
		}
		ids = append(ids, peers...)
	}
	return ids, nil
}

// Condition is the VM runtime's NetworkReady condition.
func (r *Networks) Condition(ctx context.Context) *runtimeapi.RuntimeCondition {
	c := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if msg := r.NotReady(ctx); msg != "" {
		c.Status, c.Reason, c.Message = false, "NetworkPluginNotReady", msg
	}
	return c
}
