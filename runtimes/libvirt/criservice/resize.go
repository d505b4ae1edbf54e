package criservice

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm/crifields"
	"github.com/crimux/crimux/internal/errdefs"
)

// Resizer is what the CRI face asks of in-place resize (package resize):
// VM id made the size linux asks, merged with what it has, or nothing
// changed.
type Resizer interface {
	Resize(ctx context.Context, id string, linux *runtimeapi.LinuxContainerResources) error
}

// UpdateContainerResources resizes a VM in place (kubectl patch pod
// --subresource resize) through the resize room (resize.Resizer.Resize):
// vCPUs and RAM follow the new limits in the VM's cgroup, its guest, its
// record and its definition; what the update leaves out keeps its value,
// as in containerd. A size outside what the VM was created able to take
// is InvalidArgument naming the field; a guest that does not take it, or
// a VM its user keeps paused, shut down or hibernated, is
// FailedPrecondition, and nothing changes. kubelet reports either on the
// pod's resize status. A field the VM runtime refuses
// (converter/vm/crifields) is refused first.
func (r *Service) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if err := crifields.Refuse(req); err != nil {
		return nil, err
	}
	if r.Resizer == nil {
		return nil, fmt.Errorf("in-place resize of VMs: %w", errdefs.ErrUnimplemented)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, r.Resizer.Resize(ctx, req.GetContainerId(), req.GetLinux())
}

// UpdatePodSandboxResources takes kubelet's new pod-level resources for a
// VM pod. kubelet resizes the pod's cgroup itself, and the VM follows its
// container's resources (UpdateContainerResources above), so there is
// nothing more to change: the pod must exist, and the request hold no
// field the VM runtime refuses, that is all.
func (r *Service) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	if err := crifields.Refuse(req); err != nil {
		return nil, err
	}
	if _, err := r.Store.Sandbox(req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
