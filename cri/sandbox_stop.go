package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox is idempotent: an unknown pod is already stopped.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if _, err := rt.Backend.Runtime().StopPodSandbox(ctx, req); ignoreNotFound(err) != nil {
		return nil, runtimeErr(rt, err)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox is idempotent: an unknown pod is already removed.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if _, err := rt.Backend.Runtime().RemovePodSandbox(ctx, req); ignoreNotFound(err) != nil {
		return nil, runtimeErr(rt, err)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
