package cri

import (
	"context"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
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
	decoded: func(s *Server, ctx context.Context, rt *registry.Runtime, b []byte) (any, error) {
		var req runtimeapi.PodSandboxStatusRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return nil, errdefs.Invalid("pod_sandbox_id", "the request does not decode: %v", err)
		}
		resp, err := rt.Backend.Runtime().PodSandboxStatus(ctx, &req)
		if err != nil {
			return nil, runtimeErr(rt, err)
		}
		return resp, nil
	},
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
