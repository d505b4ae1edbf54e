package criservice

import (
	"context"
	"fmt"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version names the VM runtime.
func (r *Service) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "crimux-vm", RuntimeVersion: "libvirt", RuntimeApiVersion: "v1"}, nil
}

// Status is ready when libvirtd answers and the emulator (the qemu
// wrapper) exists: checked for real on every call. NetworkReady is the
// pod network's CNI STATUS (core/cni.go).
func (r *Service) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	ready := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	if reason, msg := r.notReady(); reason != "" {
		ready.Status, ready.Reason, ready.Message = false, reason, msg
	}
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			ready, r.Networks.Condition(ctx),
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "vm"}},
	}, nil
}

func (r *Service) notReady() (reason, msg string) {
	l, err := r.Conn.Get()
	if err != nil {
		return "LibvirtUnavailable", err.Error()
	}
	if _, err := l.Version(); err != nil {
		return "LibvirtUnavailable", fmt.Sprintf("libvirtd does not answer: %v", err)
	}
	if _, err := os.Stat(r.Opts.Emulator); err != nil {
		return "EmulatorMissing", fmt.Sprintf("emulator %s: %v", r.Opts.Emulator, err)
	}
	return "", ""
}

// UpdateRuntimeConfig has nothing to do for VMs (their network is the
// node's CNI config, read for each pod).
func (r *Service) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// ListMetricDescriptors: the VM runtime exports no CRI metrics.
func (r *Service) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{}, nil
}

// ListPodSandboxMetrics: none, as above.
func (r *Service) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return &runtimeapi.ListPodSandboxMetricsResponse{}, nil
}
