package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus asks the pod's runtime (in-process callers; the wire
// is served by sandboxStatusReply, raw_reply.go).
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	answer, err := s.sandboxStatusReply(ctx, req)
	return asMessage(answer, err, &runtimeapi.PodSandboxStatusResponse{})
}

// sandboxStatusReply asks the pod's runtime; the primary's answer is
// passed through undecoded (pass_raw.go).
func (s *Server) sandboxStatusReply(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (any, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if reply, handled, err := passRaw(ctx, rt, runtimeapi.RuntimeService_PodSandboxStatus_FullMethodName, req); handled {
		if err != nil {
			return nil, err
		}
		return reply, nil
	}
	resp, err := rt.Backend.Runtime().PodSandboxStatus(ctx, req)
	if err != nil {
		return nil, runtimeErr(rt, err)
	}
	return resp, nil
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
