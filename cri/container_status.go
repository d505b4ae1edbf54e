package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus asks the container's runtime (in-process callers; the
// wire is served by containerStatusReply, raw_reply.go).
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	answer, err := s.containerStatusReply(ctx, req)
	return asMessage(answer, err, &runtimeapi.ContainerStatusResponse{})
}

// containerStatusReply asks the container's runtime; the primary's answer
// is passed through undecoded (pass_raw.go).
func (s *Server) containerStatusReply(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (any, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if reply, handled, err := passRaw(ctx, rt, runtimeapi.RuntimeService_ContainerStatus_FullMethodName, req); handled {
		if err != nil {
			return nil, err
		}
		return reply, nil
	}
	resp, err := rt.Backend.Runtime().ContainerStatus(ctx, req)
	if err != nil {
		return nil, runtimeErr(rt, err)
	}
	return resp, nil
}

// UpdateContainerResources asks the container's runtime.
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().UpdateContainerResources(ctx, req)
	return resp, runtimeErr(rt, err)
}

// ReopenContainerLog asks the container's runtime (kubelet's log rotation).
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().ReopenContainerLog(ctx, req)
	return resp, runtimeErr(rt, err)
}
