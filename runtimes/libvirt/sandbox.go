package libvirt

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/internal/errdefs"
)

// RunPodSandbox records a VM pod. The VM itself is made by CreateContainer:
// a pod is only its identity, its cgroup parent and its log directory until
// then. (Pod networking for VMs is not done yet: the pod has no IP.)
func (r *Runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	// New VM work fails fast while libvirtd is away (running VMs and their
	// records are untouched, and still listed).
	if _, err := r.conn.get(); err != nil {
		return nil, err
	}
	cfg := req.GetConfig()
	if cfg.GetMetadata().GetName() == "" || cfg.GetMetadata().GetUid() == "" {
		return nil, errdefs.Invalid("config.metadata", "name and uid must be set")
	}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return nil, errdefs.Invalid("config.linux.security_context.namespace_options.network",
			"host networking is not supported for VM pods")
	}
	rec := &sandboxRecord{
		ID: newID(), Config: cfg, Handler: req.GetRuntimeHandler(),
		CreatedAt: time.Now().UnixNano(), State: runtimeapi.PodSandboxState_SANDBOX_READY,
	}
	if err := r.store.putSandbox(rec); err != nil {
		return nil, err
	}
	r.log.Info("VM pod created", "pod", podName(cfg), "sandbox", rec.ID)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: rec.ID}, nil
}

// StopPodSandbox stops the VM (at once: kubelet has already given the
// container its grace period) and marks the pod not ready.
func (r *Runtime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	defer r.locks.lock(req.GetPodSandboxId())()
	sb, err := r.store.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	ctrs, err := r.store.containersOf(sb.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.stopVMLocked(ctx, c, 0); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	return &runtimeapi.StopPodSandboxResponse{}, r.store.putSandbox(sb)
}

// RemovePodSandbox removes the VM with everything it owns, then the pod.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	defer r.locks.lock(req.GetPodSandboxId())()
	sb, err := r.store.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	ctrs, err := r.store.containersOf(sb.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.removeVM(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	if err := r.store.deleteSandbox(sb.ID); err != nil {
		return nil, err
	}
	r.log.Info("VM pod removed", "pod", podName(sb.Config), "sandbox", sb.ID)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus reports the pod from the store.
func (r *Runtime) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := r.store.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sandboxStatus(sb)}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"runtime":"vm","containerId":%q}`, sb.ContainerID)}
	}
	if sb.ContainerID != "" {
		if c, err := r.containerStatus(ctx, sb.ContainerID); err == nil {
			resp.ContainersStatuses = []*runtimeapi.ContainerStatus{c}
		}
	}
	resp.Timestamp = time.Now().UnixNano()
	return resp, nil
}

// ListPodSandbox lists VM pods from the store: they stay listed, with
// their last known state, while libvirtd is down.
func (r *Runtime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	recs, err := r.store.sandboxes()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	var out []*runtimeapi.PodSandbox
	for _, sb := range recs {
		item := &runtimeapi.PodSandbox{
			Id: sb.ID, Metadata: sb.Config.GetMetadata(), State: sb.State, CreatedAt: sb.CreatedAt,
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.Handler,
		}
		if crifilter.Sandbox(f, item) {
			out = append(out, item)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func sandboxStatus(sb *sandboxRecord) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: sb.ID, Metadata: sb.Config.GetMetadata(), State: sb.State, CreatedAt: sb.CreatedAt,
		// No network status at all, not an empty one: kubelet recreates a
		// sandbox whose network status has no IP (PodSandboxChanged), and
		// VM pods have no pod network yet.
		Network: nil,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.Handler,
	}
}

func podName(cfg *runtimeapi.PodSandboxConfig) string {
	return cfg.GetMetadata().GetNamespace() + "/" + cfg.GetMetadata().GetName()
}
