package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// ContainerStats asks the container's runtime.
func (s *Server) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	rt, err := s.route(ctx, "container_id", req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().ContainerStats(ctx, req)
	return resp, runtimeErr(rt, err)
}

// ListContainerStats merges every runtime's stats.
func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	stats, err := s.listContainerStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: stats}, nil
}

// StreamContainerStats sends the merged stats in pages.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream runtimeapi.RuntimeService_StreamContainerStatsServer) error {
	stats, err := s.listContainerStats(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendPages(stats, func(page []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: page})
	})
}

func (s *Server) listContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return fanOut(ctx, s.owners(f.GetId(), f.GetPodSandboxId()), func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.ContainerStats, error) {
		resp, err := rt.Backend.Runtime().ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: f})
		return resp.GetStats(), err
	})
}

// PodSandboxStats asks the pod's runtime.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	rt, err := s.route(ctx, "pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp, err := rt.Backend.Runtime().PodSandboxStats(ctx, req)
	return resp, runtimeErr(rt, err)
}

// ListPodSandboxStats merges every runtime's pod stats.
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	stats, err := s.listPodSandboxStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: stats}, nil
}

// StreamPodSandboxStats sends the merged pod stats in pages.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxStatsServer) error {
	stats, err := s.listPodSandboxStats(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return sendPages(stats, func(page []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: page})
	})
}

func (s *Server) listPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return fanOut(ctx, s.owners(f.GetId()), func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.PodSandboxStats, error) {
		resp, err := rt.Backend.Runtime().ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: f})
		return resp.GetStats(), err
	})
}

// owners returns the runtime owning the first non-empty ID, or every
// backend when all are empty.
func (s *Server) owners(ids ...string) []*registry.Runtime {
	reg := s.reg.Load()
	for _, id := range ids {
		if id != "" {
			return []*registry.Runtime{reg.ForID(id)}
		}
	}
	return reg.Backends()
}
