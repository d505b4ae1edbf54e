package crifake

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func containerStats(c *runtimeapi.Container) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: 1, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 42}},
	}
}

// ContainerStats reports fixed stats of a known container.
func (f *Fake) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	resp := &runtimeapi.ContainerStatsResponse{}
	err := f.withContainer(req.GetContainerId(), func(c *runtimeapi.Container) { resp.Stats = containerStats(c) })
	return resp, err
}

func (f *Fake) listContainerStats(filter *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	var out []*runtimeapi.ContainerStats
	for _, c := range f.listContainers(&runtimeapi.ContainerFilter{
		Id: filter.GetId(), PodSandboxId: filter.GetPodSandboxId(), LabelSelector: filter.GetLabelSelector(),
	}) {
		out = append(out, containerStats(c))
	}
	return out
}

// ListContainerStats reports the stats of the matching containers.
func (f *Fake) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{Stats: f.listContainerStats(req.GetFilter())}, nil
}

// StreamContainerStats sends the stats of the matching containers in one message.
func (f *Fake) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, s grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	return sendNonEmpty(f.listContainerStats(req.GetFilter()), func(items []*runtimeapi.ContainerStats) error {
		return s.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: items})
	})
}

// podStats are a pod's stats with those of its containers.
func (f *Fake) podStats(sb *runtimeapi.PodSandbox) *runtimeapi.PodSandboxStats {
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sb.Id, Metadata: sb.Metadata, Labels: sb.Labels, Annotations: sb.Annotations},
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Containers: f.listContainerStats(&runtimeapi.ContainerStatsFilter{PodSandboxId: sb.Id}),
		},
	}
}

// PodSandboxStats reports fixed stats of a known pod.
func (f *Fake) PodSandboxStats(_ context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	var sb *runtimeapi.PodSandbox
	if err := f.withSandbox(req.GetPodSandboxId(), func(s *runtimeapi.PodSandbox) { sb = s }); err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: f.podStats(sb)}, nil
}

func (f *Fake) listPodStats(filter *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	var out []*runtimeapi.PodSandboxStats
	for _, sb := range f.listSandboxes(&runtimeapi.PodSandboxFilter{Id: filter.GetId(), LabelSelector: filter.GetLabelSelector()}) {
		out = append(out, f.podStats(sb))
	}
	return out
}

// ListPodSandboxStats reports the stats of the matching pods.
func (f *Fake) ListPodSandboxStats(_ context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: f.listPodStats(req.GetFilter())}, nil
}

// StreamPodSandboxStats sends the stats of the matching pods in one message.
func (f *Fake) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, s grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	return sendNonEmpty(f.listPodStats(req.GetFilter()), func(items []*runtimeapi.PodSandboxStats) error {
		return s.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: items})
	})
}

// ListMetricDescriptors answers one fixed descriptor.
func (f *Fake) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: clones(f.metrics)}, nil
}

func (f *Fake) podMetrics() []*runtimeapi.PodSandboxMetrics {
	var out []*runtimeapi.PodSandboxMetrics
	for _, sb := range f.listSandboxes(nil) {
		m := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.Id}
		for _, c := range f.listContainers(&runtimeapi.ContainerFilter{PodSandboxId: sb.Id}) {
			m.ContainerMetrics = append(m.ContainerMetrics, &runtimeapi.ContainerMetrics{ContainerId: c.Id, Metrics: []*runtimeapi.Metric{
				{Name: "container_cpu_usage_seconds_total", MetricType: runtimeapi.MetricType_COUNTER, Value: &runtimeapi.UInt64Value{Value: 1}},
			}})
		}
		out = append(out, m)
	}
	return out
}

// ListPodSandboxMetrics reports one metric per container of every pod.
func (f *Fake) ListPodSandboxMetrics(context.Context, *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: f.podMetrics()}, nil
}

// StreamPodSandboxMetrics sends the pod metrics in one message.
func (f *Fake) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, s grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return sendNonEmpty(f.podMetrics(), func(items []*runtimeapi.PodSandboxMetrics) error {
		return s.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: items})
	})
}
