package criservice

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/converter/vm/crifields"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// RunPodSandbox makes a VM pod: its record and its pod network (a network
// namespace, CNI ADD, the guest's side; see runtimes/libvirt/podnet). The
// VM itself is made by CreateContainer. The record comes first, marked
// Creating (intent): whatever a failure or a crash leaves half made is
// torn down, here or by the collector.
func (r *Service) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	// New VM work fails fast while libvirtd is away (running VMs and their
	// records are untouched, and still listed).
	if _, err := r.Conn.Get(); err != nil {
		return nil, err
	}
	cfg := req.GetConfig()
	if cfg.GetMetadata().GetName() == "" || cfg.GetMetadata().GetUid() == "" {
		return nil, errdefs.Invalid("config.metadata", "name and uid must be set")
	}
	if cfg.GetLinux().GetCgroupParent() == "" {
		return nil, errdefs.Invalid("config.linux.cgroup_parent",
			"a VM pod needs one: its qemu runs in the pod's cgroup, with the pod's limits (kubelet always sets it; with crictl, give the pod one)")
	}
	// What the VM runtime refuses (host namespaces, sysctls, privileged:
	// converter/vm/crifields), before anything is made.
	if err := crifields.Refuse(req); err != nil {
		return nil, err
	}
	// Traffic shaping for CNI's bandwidth capability (podnet), checked as
	// containerd checks a container pod's.
	if _, err := vm.PodBandwidth(cfg.GetAnnotations()); err != nil {
		return nil, err
	}
	if err := r.RequireRoom("RunPodSandbox"); err != nil {
		return nil, err
	}
	if err := r.Networks.RequireReady(ctx); err != nil {
		return nil, err
	}
	sb := &store.Sandbox{
		ID: core.NewID(), Config: cfg, Handler: req.GetRuntimeHandler(),
		CreatedAt: time.Now().UnixNano(), State: runtimeapi.PodSandboxState_SANDBOX_READY, Creating: true,
	}
	if err := r.Networks.Plan(sb); err != nil {
		return nil, err
	}
	defer r.Locks.Lock(sb.ID)()
	if err := r.Store.PutSandbox(sb); err != nil {
		return nil, err
	}
	if err := r.Networks.Setup(ctx, sb); err != nil {
		r.AbandonSandbox(ctx, sb)
		return nil, err
	}
	sb.Creating = false
	if err := r.Store.PutSandbox(sb); err != nil {
		r.AbandonSandbox(ctx, sb)
		return nil, err
	}
	r.Log.Info("VM pod created", "pod", core.PodName(cfg), "sandbox", sb.ID, "ip", vmnet.PodStatus(sb).GetIp())
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.ID}, nil
}
