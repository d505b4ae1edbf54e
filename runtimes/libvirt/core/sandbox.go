package core

import (
	"context"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// NetworkGCTimeout bounds the CNI calls of a teardown that is not the
// caller's (an abandoned pod, one collector pass).
const NetworkGCTimeout = 2 * time.Minute

// AbandonSandbox undoes a pod RunPodSandbox could not finish; what cannot
// be undone now stays recorded (Removing) for the collector.
func (r *Runtime) AbandonSandbox(ctx context.Context, sb *store.Sandbox) {
	// Not the caller's context: it may be what ended (kubelet gave up).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), NetworkGCTimeout)
	defer cancel()
	if err := r.FinishSandboxRemoval(ctx, sb); err != nil {
		r.Log.Warn("failed VM pod not cleaned up yet; the collector will retry", "sandbox", sb.ID, "err", err)
	}
}

// FinishSandboxRemoval tears down a pod's network and deletes its record;
// on failure the record stays, marked Removing.
func (r *Runtime) FinishSandboxRemoval(ctx context.Context, sb *store.Sandbox) error {
	if !sb.Removing {
		sb.Removing = true
		if err := r.Store.PutSandbox(sb); err != nil {
			return err
		}
	}
	if err := r.TeardownNetwork(ctx, sb); err != nil {
		return err
	}
	return r.Store.DeleteSandbox(sb.ID)
}
