package libvirt

import (
	"context"
	"fmt"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// Version names the VM runtime.
func (r *Runtime) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "crimux-vm", RuntimeVersion: "libvirt", RuntimeApiVersion: "v1"}, nil
}

// Status is ready when libvirtd answers and the emulator (the qemu
// wrapper) exists: checked for real on every call.
func (r *Runtime) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	ready := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	if reason, msg := r.notReady(); reason != "" {
		ready.Status, ready.Reason, ready.Message = false, reason, msg
	}
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			ready, {Type: runtimeapi.NetworkReady, Status: true},
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "vm"}},
	}, nil
}

func (r *Runtime) notReady() (reason, msg string) {
	l, err := r.conn.get()
	if err != nil {
		return "LibvirtUnavailable", err.Error()
	}
	if _, err := l.ConnectGetVersion(); err != nil {
		return "LibvirtUnavailable", fmt.Sprintf("libvirtd does not answer: %v", err)
	}
	if _, err := os.Stat(r.opts.Emulator); err != nil {
		return "EmulatorMissing", fmt.Sprintf("emulator %s: %v", r.opts.Emulator, err)
	}
	return "", ""
}

// UpdateRuntimeConfig has nothing to do for VMs yet (no pod network).
func (r *Runtime) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

func notForVMs(what string) error {
	return fmt.Errorf("%s is not supported for VM pods: %w", what, errdefs.ErrUnimplemented)
}

// ExecSync: a VM has no container to exec into (no guest agent).
func (r *Runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return nil, notForVMs("exec")
}

// Exec: as ExecSync.
func (r *Runtime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, notForVMs("exec")
}

// PortForward needs the pod network, which VM pods do not have yet.
func (r *Runtime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, notForVMs("port-forward")
}

// PodSandboxStats reports the pod's VM.
func (r *Runtime) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := r.store.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: r.podStats(sb)}, nil
}

// ListPodSandboxStats reports every VM pod that matches.
func (r *Runtime) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	recs, err := r.store.sandboxes()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	var out []*runtimeapi.PodSandboxStats
	for _, sb := range recs {
		item := &runtimeapi.PodSandbox{Id: sb.ID, Labels: sb.Config.GetLabels()}
		if f != nil && !matchPodStats(f, item) {
			continue
		}
		out = append(out, r.podStats(sb))
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

func (r *Runtime) podStats(sb *sandboxRecord) *runtimeapi.PodSandboxStats {
	st := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.ID, Metadata: sb.Config.GetMetadata(),
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations()},
		Linux: &runtimeapi.LinuxPodSandboxStats{},
	}
	if sb.ContainerID == "" {
		return st
	}
	if c, err := r.store.container(sb.ContainerID); err == nil {
		if cs, err := r.stats(c); err == nil {
			st.Linux.Cpu, st.Linux.Memory = cs.Cpu, cs.Memory
			st.Linux.Containers = []*runtimeapi.ContainerStats{cs}
		}
	}
	return st
}

// ListMetricDescriptors: the VM runtime exports no CRI metrics.
func (r *Runtime) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{}, nil
}

// ListPodSandboxMetrics: none, as above.
func (r *Runtime) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return &runtimeapi.ListPodSandboxMetricsResponse{}, nil
}
