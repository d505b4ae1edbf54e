package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// CheckpointContainer asks the container's runtime.
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().CheckpointContainer(ctx, req)
	return resp, runtimeErr(rt, err)
}

// CheckpointPod asks the pod's runtime.
func (s *Server) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().CheckpointPod(ctx, req)
	return resp, runtimeErr(rt, err)
}

// RestorePod makes a new pod, so it is routed like RunPodSandbox: by the
// handler and annotations of the pod config it carries. The route is not
// recorded: the metrics have always labelled RestorePod "all".
func (s *Server) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	if req.GetCheckpointPath() == "" {
		return nil, errdefs.Invalid("checkpoint_path", "must be set")
	}
	rt, err := s.reg.Load().ForNewPod(req.GetRuntimeHandler(), req.GetConfig().GetAnnotations())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().RestorePod(ctx, req)
	return resp, runtimeErr(rt, err)
}
