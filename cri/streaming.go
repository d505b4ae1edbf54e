package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec, Attach and PortForward return the URL of the owning runtime's own
// streaming server unchanged: the stream never passes through crimux.

// ExecSync runs a command in the container's runtime.
func (s *Server) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().ExecSync(ctx, req)
	return resp, runtimeErr(rt, err)
}

// Exec returns the runtime's streaming URL.
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().Exec(ctx, req)
	return resp, runtimeErr(rt, err)
}

// Attach returns the runtime's streaming URL.
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().Attach(ctx, req)
	return resp, runtimeErr(rt, err)
}

// PortForward returns the runtime's streaming URL.
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().PortForward(ctx, req)
	return resp, runtimeErr(rt, err)
}
