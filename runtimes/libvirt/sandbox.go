package libvirt

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/internal/errdefs"
)

// RunPodSandbox makes a VM pod: its record and its pod network (a network
// namespace, CNI ADD, the guest's side; see runtimes/libvirt/podnet). The
// VM itself is made by CreateContainer. The record comes first, marked
// Creating (intent): whatever a failure or a crash leaves half made is
// torn down, here or by the collector.
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
			"host networking is not supported for VM pods: a VM has its own kernel and cannot share the node's network stack")
	}
	sb := &sandboxRecord{
		ID: newID(), Config: cfg, Handler: req.GetRuntimeHandler(),
		CreatedAt: time.Now().UnixNano(), State: runtimeapi.PodSandboxState_SANDBOX_READY, Creating: true,
	}
	if err := r.planNetwork(sb); err != nil {
		return nil, err
	}
	defer r.locks.lock(sb.ID)()
	if err := r.store.putSandbox(sb); err != nil {
		return nil, err
	}
	if err := r.setupNetwork(ctx, sb); err != nil {
		r.abandonSandbox(ctx, sb)
		return nil, err
	}
	sb.Creating = false
	if err := r.store.putSandbox(sb); err != nil {
		r.abandonSandbox(ctx, sb)
		return nil, err
	}
	r.log.Info("VM pod created", "pod", podName(cfg), "sandbox", sb.ID, "ip", networkStatus(sb).GetIp())
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.ID}, nil
}

// abandonSandbox undoes a pod RunPodSandbox could not finish; what cannot
// be undone now stays recorded (Removing) for the collector.
func (r *Runtime) abandonSandbox(ctx context.Context, sb *sandboxRecord) {
	// Not the caller's context: it may be what ended (kubelet gave up).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), networkGCTimeout)
	defer cancel()
	if err := r.finishSandboxRemoval(ctx, sb); err != nil {
		r.log.Warn("failed VM pod not cleaned up yet; the collector will retry", "sandbox", sb.ID, "err", err)
	}
}

// finishSandboxRemoval tears down a pod's network and deletes its record;
// on failure the record stays, marked Removing.
func (r *Runtime) finishSandboxRemoval(ctx context.Context, sb *sandboxRecord) error {
	if !sb.Removing {
		sb.Removing = true
		if err := r.store.putSandbox(sb); err != nil {
			return err
		}
	}
	if err := r.teardownNetwork(ctx, sb); err != nil {
		return err
	}
	return r.store.deleteSandbox(sb.ID)
}

// StopPodSandbox stops the VM (at once: kubelet has already given the
// container its grace period) and marks the pod not ready.
func (r *Runtime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	defer r.locks.lock(req.GetPodSandboxId())()
	sb, ctrs, err := r.sandboxWithContainers(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.stopVMLocked(ctx, c, 0); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if err := r.store.putSandbox(sb); err != nil {
		return nil, err
	}
	// As containerd does, the network goes at stop: the IP returns to the
	// pool. A failed DEL fails the call (kubelet retries) and is retried
	// by the collector meanwhile.
	if err := r.teardownNetwork(ctx, sb); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the VM with everything it owns, then the pod.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	defer r.locks.lock(req.GetPodSandboxId())()
	sb, ctrs, err := r.sandboxWithContainers(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if err := r.removeVM(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	if err := r.finishSandboxRemoval(ctx, sb); err != nil {
		// Gone for CRI; the collector retries the rest.
		r.log.Warn("VM pod removal incomplete; the collector will retry", "sandbox", sb.ID, "err", err)
		return &runtimeapi.RemovePodSandboxResponse{}, nil
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
	if sb.Creating || sb.Removing {
		return nil, fmt.Errorf("pod sandbox %q: %w", sb.ID, errdefs.ErrNotFound)
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sandboxStatus(sb)}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": verboseInfo(sb)}
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
		if sb.Creating || sb.Removing {
			continue
		}
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
		Network: networkStatus(sb),
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(), RuntimeHandler: sb.Handler,
	}
}

// verboseInfo is PodSandboxStatus' verbose "info": the VM and its network.
func verboseInfo(sb *sandboxRecord) string {
	info := map[string]any{"runtime": "vm", "containerId": sb.ContainerID}
	if a := sb.Net; a != nil {
		info["network"] = map[string]any{
			"netns": a.NetNS, "ip": a.IP, "prefixLen": a.PrefixLen, "gateway": a.Gateway,
			"guestMAC": a.GuestMAC, "hostVeth": a.HostVeth, "down": sb.NetDown,
		}
	}
	b, _ := json.Marshal(info)
	return string(b)
}

func podName(cfg *runtimeapi.PodSandboxConfig) string {
	return cfg.GetMetadata().GetNamespace() + "/" + cfg.GetMetadata().GetName()
}

// sandboxWithContainers reads a pod and its containers from the store.
func (r *Runtime) sandboxWithContainers(id string) (*sandboxRecord, []*containerRecord, error) {
	sb, err := r.store.sandbox(id)
	if err != nil {
		return nil, nil, err
	}
	ctrs, err := r.store.containersOf(sb.ID)
	if err != nil {
		return nil, nil, err
	}
	return sb, ctrs, nil
}
