package criservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
)

// StopPodSandbox stops the VM (at once: kubelet has already given the
// container its grace period) and marks the pod not ready.
func (r *Service) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	defer r.Locks.Lock(req.GetPodSandboxId())()
	sb, ctrs, err := r.SandboxWithContainers(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.StopVMLocked(ctx, c, 0); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if err := r.Store.PutSandbox(sb); err != nil {
		return nil, err
	}
	r.clones().ForgetAsks(sb.ID)
	// As containerd does, the network goes at stop: the IP returns to the
	// pool. A failed DEL fails the call (kubelet retries) and is retried
	// by the collector meanwhile.
	if err := r.Networks.Teardown(ctx, sb); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the VM with everything it owns, then the pod.
func (r *Service) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	defer r.Locks.Lock(req.GetPodSandboxId())()
	sb, ctrs, err := r.SandboxWithContainers(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.RemoveVM(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	if err := r.FinishSandboxRemoval(ctx, sb); err != nil {
		// Gone for CRI; the collector retries the rest.
		r.Log.Warn("VM pod removal incomplete; the collector will retry", "sandbox", sb.ID, "err", err)
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	r.Log.Info("VM pod removed", "pod", core.PodName(sb.Config), "sandbox", sb.ID)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
