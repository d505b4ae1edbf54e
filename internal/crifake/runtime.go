package crifake

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version names the fake.
func (f *Fake) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "crifake-" + f.name, RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}, nil
}

// RunPodSandbox adds a ready pod.
func (f *Fake) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg := req.GetConfig()
	sb := &runtimeapi.PodSandbox{
		Id: f.newID("pod"), Metadata: cfg.GetMetadata(), State: runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: time.Now().UnixNano(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		RuntimeHandler: req.GetRuntimeHandler(),
	}
	f.sandboxes = append(f.sandboxes, sb)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.Id}, nil
}

// StopPodSandbox makes a pod not ready.
func (f *Fake) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, sb := f.sandbox(req.GetPodSandboxId())
	if sb == nil {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox forgets a pod.
func (f *Fake) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _ := f.sandbox(req.GetPodSandboxId())
	if i < 0 {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	f.sandboxes = slices.Delete(f.sandboxes, i, i+1)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus reports a pod and the statuses of its containers.
func (f *Fake) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, sb := f.sandbox(req.GetPodSandboxId())
	if sb == nil {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sandboxStatus(sb)}
	for _, c := range f.containers {
		if c.PodSandboxId == sb.Id {
			resp.ContainersStatuses = append(resp.ContainersStatuses, containerStatus(c))
		}
	}
	return resp, nil
}

func sandboxStatus(sb *runtimeapi.PodSandbox) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: sb.Id, Metadata: sb.Metadata, State: sb.State, CreatedAt: sb.CreatedAt,
		Labels: sb.Labels, Annotations: sb.Annotations, RuntimeHandler: sb.RuntimeHandler,
	}
}

func (f *Fake) listSandboxes(filter *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, sb := range f.sandboxes {
		if matchSandbox(filter, sb) {
			out = append(out, proto.Clone(sb).(*runtimeapi.PodSandbox))
		}
	}
	return out
}

// ListPodSandbox lists the pods matching the filter.
func (f *Fake) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: f.listSandboxes(req.GetFilter())}, nil
}

// StreamPodSandboxes sends the matching pods in one message (none when
// there are none: the CRI asks for lists of at least one item).
func (f *Fake) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, s grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	return sendNonEmpty(f.listSandboxes(req.GetFilter()), func(items []*runtimeapi.PodSandbox) error {
		return s.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: items})
	})
}

func sendNonEmpty[T any](items []T, send func([]T) error) error {
	if len(items) == 0 {
		return nil
	}
	return send(items)
}

// CreateContainer adds a created container to an existing pod.
func (f *Fake) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, sb := f.sandbox(req.GetPodSandboxId()); sb == nil {
		return nil, notFound("pod sandbox", req.GetPodSandboxId())
	}
	cfg := req.GetConfig()
	if cfg == nil {
		return nil, status.Error(codes.InvalidArgument, "config is nil")
	}
	c := &runtimeapi.Container{
		Id: f.newID("ctr"), PodSandboxId: req.GetPodSandboxId(), Metadata: cfg.GetMetadata(),
		Image: cfg.GetImage(), ImageRef: cfg.GetImage().GetImage(), ImageId: "sha256:" + cfg.GetImage().GetImage(),
		State: runtimeapi.ContainerState_CONTAINER_CREATED, CreatedAt: time.Now().UnixNano(),
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
	}
	f.containers = append(f.containers, c)
	return &runtimeapi.CreateContainerResponse{ContainerId: c.Id}, nil
}

// setState changes a container's state.
func (f *Fake) setState(id string, state runtimeapi.ContainerState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, c := f.container(id)
	if c == nil {
		return notFound("container", id)
	}
	c.State = state
	return nil
}

// StartContainer makes a container running.
func (f *Fake) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, f.setState(req.GetContainerId(), runtimeapi.ContainerState_CONTAINER_RUNNING)
}

// StopContainer makes a container exited.
func (f *Fake) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, f.setState(req.GetContainerId(), runtimeapi.ContainerState_CONTAINER_EXITED)
}

// RemoveContainer forgets a container.
func (f *Fake) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, _ := f.container(req.GetContainerId())
	if i < 0 {
		return nil, notFound("container", req.GetContainerId())
	}
	f.containers = slices.Delete(f.containers, i, i+1)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *Fake) listContainers(filter *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if matchContainer(filter, c) {
			out = append(out, proto.Clone(c).(*runtimeapi.Container))
		}
	}
	return out
}

// ListContainers lists the containers matching the filter.
func (f *Fake) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: f.listContainers(req.GetFilter())}, nil
}

// StreamContainers sends the matching containers in one message.
func (f *Fake) StreamContainers(req *runtimeapi.StreamContainersRequest, s grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	return sendNonEmpty(f.listContainers(req.GetFilter()), func(items []*runtimeapi.Container) error {
		return s.Send(&runtimeapi.StreamContainersResponse{Containers: items})
	})
}

func containerStatus(c *runtimeapi.Container) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id: c.Id, Metadata: c.Metadata, State: c.State, CreatedAt: c.CreatedAt, Image: c.Image,
		ImageRef: c.ImageRef, ImageId: c.ImageId, Labels: c.Labels, Annotations: c.Annotations,
	}
}

// withContainer runs fn on a copy of container id, or answers NotFound.
func (f *Fake) withContainer(id string, fn func(*runtimeapi.Container)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, c := f.container(id)
	if c == nil {
		return notFound("container", id)
	}
	fn(proto.Clone(c).(*runtimeapi.Container))
	return nil
}

// withSandbox runs fn on a copy of pod id, or answers NotFound.
func (f *Fake) withSandbox(id string, fn func(*runtimeapi.PodSandbox)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, sb := f.sandbox(id)
	if sb == nil {
		return notFound("pod sandbox", id)
	}
	fn(proto.Clone(sb).(*runtimeapi.PodSandbox))
	return nil
}

// ContainerStatus reports a container.
func (f *Fake) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	resp := &runtimeapi.ContainerStatusResponse{}
	err := f.withContainer(req.GetContainerId(), func(c *runtimeapi.Container) { resp.Status = containerStatus(c) })
	return resp, err
}

// UpdateContainerResources accepts any resources of a known container.
func (f *Fake) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return &runtimeapi.UpdateContainerResourcesResponse{}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// ReopenContainerLog accepts a known container.
func (f *Fake) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	return &runtimeapi.ReopenContainerLogResponse{}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// ExecSync answers "ok" for a known container.
func (f *Fake) ExecSync(_ context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return &runtimeapi.ExecSyncResponse{Stdout: []byte("ok")}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// Exec returns a streaming URL of the fake.
func (f *Fake) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return &runtimeapi.ExecResponse{Url: "http://" + f.name + "/exec/" + req.GetContainerId()}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// Attach returns a streaming URL of the fake.
func (f *Fake) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return &runtimeapi.AttachResponse{Url: "http://" + f.name + "/attach/" + req.GetContainerId()}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// PortForward returns a streaming URL of the fake.
func (f *Fake) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return &runtimeapi.PortForwardResponse{Url: "http://" + f.name + "/portforward/" + req.GetPodSandboxId()}, f.withSandbox(req.GetPodSandboxId(), func(*runtimeapi.PodSandbox) {})
}

// UpdateRuntimeConfig accepts anything.
func (f *Fake) UpdateRuntimeConfig(context.Context, *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// Status answers what SetStatus set (ready, with a network, by default).
func (f *Fake) Status(_ context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := proto.Clone(f.status).(*runtimeapi.StatusResponse)
	if !req.GetVerbose() {
		resp.Info = nil
	}
	return resp, nil
}

// CheckpointContainer accepts a known container.
func (f *Fake) CheckpointContainer(_ context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	return &runtimeapi.CheckpointContainerResponse{}, f.withContainer(req.GetContainerId(), func(*runtimeapi.Container) {})
}

// CheckpointPod accepts a known pod.
func (f *Fake) CheckpointPod(_ context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	return &runtimeapi.CheckpointPodResponse{}, f.withSandbox(req.GetPodSandboxId(), func(*runtimeapi.PodSandbox) {})
}

// RestorePod adds a ready pod with one created container per config.
func (f *Fake) RestorePod(_ context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := &runtimeapi.PodSandbox{Id: f.newID("pod"), Metadata: req.GetConfig().GetMetadata(), State: runtimeapi.PodSandboxState_SANDBOX_READY, RuntimeHandler: req.GetRuntimeHandler()}
	f.sandboxes = append(f.sandboxes, sb)
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: sb.Id}
	for _, cfg := range req.GetContainerConfigs() {
		c := &runtimeapi.Container{Id: f.newID("ctr"), PodSandboxId: sb.Id, Metadata: cfg.GetMetadata(), State: runtimeapi.ContainerState_CONTAINER_CREATED}
		f.containers = append(f.containers, c)
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: cfg.GetMetadata().GetName(), ContainerId: c.Id})
	}
	return resp, nil
}

// GetContainerEvents sends the events of SetEvents, then those of Emit
// until the caller goes away (or the server stops).
func (f *Fake) GetContainerEvents(_ *runtimeapi.GetEventsRequest, s grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	l := &eventListener{events: make(chan *runtimeapi.ContainerEventResponse), done: make(chan struct{})}
	f.mu.Lock()
	evs := clones(f.events)
	f.listeners[l] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.listeners, l)
		f.mu.Unlock()
		close(l.done)
	}()
	for _, ev := range evs {
		if err := s.Send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case <-s.Context().Done():
			return nil
		case ev := <-l.events:
			if err := s.Send(ev); err != nil {
				return err
			}
		}
	}
}

// RuntimeConfig reports the systemd cgroup driver.
func (f *Fake) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD}}, nil
}

// UpdatePodSandboxResources accepts any resources of a known pod.
func (f *Fake) UpdatePodSandboxResources(_ context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, f.withSandbox(req.GetPodSandboxId(), func(*runtimeapi.PodSandbox) {})
}
