package libvirt

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
)

// ContainerStatus reports the VM from the store; verbose info names the
// domain and the accelerator.
func (r *Runtime) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	st, err := r.containerStatus(ctx, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.GetVerbose() {
		c, err := r.store.container(req.GetContainerId())
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"domain":%q,"accel":%q,"vcpus":%d,"memoryMiB":%d,"dir":%q,"powerState":%q}`,
			c.Domain, c.Accel, c.VCPUs, c.MemoryMiB, c.Dir, c.powerState())}
	}
	return resp, nil
}

func (r *Runtime) containerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	c, err := r.store.container(id)
	if err != nil {
		return nil, err
	}
	reason, message := c.Reason, c.Message
	if pr, pm, ok := powerStatus(c); ok {
		reason, message = pr, pm
	}
	return &runtimeapi.ContainerStatus{
		Id: c.ID, Metadata: c.Config.GetMetadata(), State: c.State,
		CreatedAt: c.CreatedAt, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, ExitCode: c.ExitCode,
		Image: c.Config.GetImage(), ImageRef: c.ImageRef, Reason: reason, Message: message,
		Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(), LogPath: c.LogPath,
		Resources: &runtimeapi.ContainerResources{Linux: c.Config.GetLinux().GetResources()},
	}, nil
}

// ListContainers lists VMs from the store (kept while libvirtd is down).
func (r *Runtime) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	recs, err := r.store.liveContainers()
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.Container
	for _, c := range recs {
		item := &runtimeapi.Container{
			Id: c.ID, PodSandboxId: c.SandboxID, Metadata: c.Config.GetMetadata(), Image: c.Config.GetImage(),
			ImageRef: c.ImageRef, State: c.State, CreatedAt: c.CreatedAt,
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
		}
		if crifilter.Container(req.GetFilter(), item) {
			out = append(out, item)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

// event makes the CRI event of a container change.
func (r *Runtime) event(c *containerRecord, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	ev := &runtimeapi.ContainerEventResponse{ContainerId: c.ID, ContainerEventType: typ, CreatedAt: time.Now().UnixNano()}
	if sb, err := r.store.sandbox(c.SandboxID); err == nil {
		ev.PodSandboxStatus = sandboxStatus(sb)
	}
	if st, err := r.containerStatus(context.Background(), c.ID); err == nil {
		ev.ContainersStatuses = []*runtimeapi.ContainerStatus{st}
	}
	return ev
}
