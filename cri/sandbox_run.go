package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// RunPodSandbox picks the runtime of the new pod (handler, then the
// workload-type annotation, then the primary) and lets it create the pod.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	rt, routeErr := s.newPodRuntime(ctx, req.GetRuntimeHandler(), cfg.GetAnnotations()) // before the checks, for the metrics (routing.go)
	if cfg == nil {
		return nil, errdefs.Invalid("config", "must be set")
	}
	if cfg.GetMetadata() == nil {
		return nil, errdefs.Invalid("config.metadata", "must be set")
	}
	if routeErr != nil {
		return nil, routeErr
	}
	if err := s.checkSandboxIDs(cfg); err != nil {
		return nil, err
	}
	s.logger(ctx).Debug("run pod sandbox", "runtime", rt.Name, "pod", cfg.Metadata.Namespace+"/"+cfg.Metadata.Name)
	resp, err := rt.Backend.Runtime().RunPodSandbox(ctx, req)
	if err != nil {
		return nil, runtimeErr(rt, err)
	}
	if resp.GetPodSandboxId() == "" {
		return nil, fmt.Errorf("runtime %q returned an empty pod_sandbox_id: %w", rt.Name, errdefs.ErrUnavailable)
	}
	return resp, nil
}
