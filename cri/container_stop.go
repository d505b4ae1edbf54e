package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer is idempotent: an unknown container is already stopped.
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if _, err := rt.Backend.Runtime().StopContainer(ctx, req); ignoreNotFound(err) != nil {
		return nil, runtimeErr(rt, err)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer is idempotent: an unknown container is already removed.
func (s *Server) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if _, err := rt.Backend.Runtime().RemoveContainer(ctx, req); ignoreNotFound(err) != nil {
		return nil, runtimeErr(rt, err)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}
