package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// ListMetricDescriptors merges the runtimes' descriptors, each name once.
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	all, err := fanOut(ctx, s.reg.Load().Backends(), func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.MetricDescriptor, error) {
		resp, err := rt.Backend.Runtime().ListMetricDescriptors(ctx, req)
		return resp.GetDescriptors(), err
	})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*runtimeapi.MetricDescriptor
	for _, d := range all {
		if !seen[d.Name] {
			seen[d.Name] = true
			out = append(out, d)
		}
	}
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: out}, nil
}

// ListPodSandboxMetrics merges every runtime's pod metrics.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	m, err := s.listPodMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: m}, nil
}

// StreamPodSandboxMetrics sends the merged pod metrics in pages.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxMetricsServer) error {
	m, err := s.listPodMetrics(stream.Context())
	if err != nil {
		return err
	}
	return sendPages(m, func(page []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: page})
	})
}

func (s *Server) listPodMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return fanOut(ctx, s.reg.Load().Backends(), func(ctx context.Context, rt *registry.Runtime) ([]*runtimeapi.PodSandboxMetrics, error) {
		resp, err := rt.Backend.Runtime().ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		return resp.GetPodMetrics(), err
	})
}
