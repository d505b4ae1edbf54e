package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// CreateContainer goes to the runtime owning the pod.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if req.GetConfig() == nil {
		return nil, errdefs.Invalid("config", "must be set")
	}
	if err := s.checkContainerIDs(req.GetConfig()); err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().CreateContainer(ctx, req)
	if err != nil {
		return nil, runtimeErr(rt, err)
	}
	if resp.GetContainerId() == "" {
		return nil, fmt.Errorf("runtime %q returned an empty container_id: %w", rt.Name, errdefs.ErrUnavailable)
	}
	return resp, nil
}

// StartContainer goes to the container's runtime.
func (s *Server) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().StartContainer(ctx, req)
	return resp, runtimeErr(rt, err)
}
