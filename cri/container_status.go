package cri

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus asks the container's runtime (in-process callers; the
// wire is served by containerStatus's handler, raw_request.go).
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return viaWire(s, ctx, containerStatus, req, &runtimeapi.ContainerStatusResponse{})
}

// containerStatus asks the container's runtime: the primary with the
// request and its answer as they are (raw_request.go), another runtime
// decoded.
var containerStatus = statusCall{
	method: runtimeapi.RuntimeService_ContainerStatus_FullMethodName,
	field:  "container_id",
	decoded: decodedAs(func(c runtimeapi.RuntimeServiceClient, ctx context.Context, req *runtimeapi.ContainerStatusRequest) (proto.Message, error) {
		return c.ContainerStatus(ctx, req)
	}),
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
