package cri

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus asks the pod's runtime (in-process callers; the wire
// is served by sandboxStatus's handler, raw_request.go).
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return viaWire(s, ctx, sandboxStatus, req, &runtimeapi.PodSandboxStatusResponse{})
}

// sandboxStatus asks the pod's runtime: the primary with the request and
// its answer as they are (raw_request.go), another runtime decoded.
var sandboxStatus = statusCall{
	method: runtimeapi.RuntimeService_PodSandboxStatus_FullMethodName,
	field:  "pod_sandbox_id",
	decoded: decodedAs(func(c runtimeapi.RuntimeServiceClient, ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (proto.Message, error) {
		return c.PodSandboxStatus(ctx, req)
	}),
}

// UpdatePodSandboxResources asks the pod's runtime.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().UpdatePodSandboxResources(ctx, req)
	return resp, runtimeErr(rt, err)
}
