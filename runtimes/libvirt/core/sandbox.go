package core

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// NetworkGCTimeout bounds the CNI calls of a teardown that is not the
// caller's (an abandoned pod, one collector pass).
const NetworkGCTimeout = 2 * time.Minute

// EnsureIdentity gives pod sb its own uid and gid unless it has them (or
// identities are off), recorded in its record (vmidentity.Allocator's
// Ensure). The caller holds the pod's lock.
func (r *Runtime) EnsureIdentity(sb *store.Sandbox) (*store.VMIdentity, error) {
	return r.IDs.Ensure(sb)
}

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
	if err := r.Networks.Teardown(ctx, sb); err != nil {
		return err
	}
	if err := r.removePodFiles(sb); err != nil {
		return err
	}
	return r.Store.DeleteSandbox(sb.ID)
}

// removePodFiles deletes the pod's directory (its root disk) once no VM
// of the pod is left: a VM whose teardown is still pending (libvirtd
// away) may still run on that disk.
func (r *Runtime) removePodFiles(sb *store.Sandbox) error {
	all, err := r.Store.Containers()
	if err != nil {
		return err
	}
	for _, c := range all {
		if c.SandboxID == sb.ID {
			return fmt.Errorf("VM %s of pod %s is not torn down yet: its root disk stays", c.ID, sb.ID)
		}
	}
	dir := vmfiles.PodDir(r.Opts.StateDir, sb.ID)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pod files %s: %w", dir, err)
	}
	return nil
}
