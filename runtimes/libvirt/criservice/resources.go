package criservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// UpdateContainerResources updates the VM's cgroup limits. The guest's
// vCPUs and RAM stay as they were booted: resizing a running guest is not
// done (yet), so raising a limit gives qemu headroom, not the guest more.
func (r *Service) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, unlock, err := r.LockContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	res := req.GetLinux()
	if res == nil {
		return nil, errdefs.Invalid("linux", "must be set for a VM")
	}
	if res.GetMemoryLimitInBytes() > 0 && res.GetMemoryLimitInBytes() < int64(c.MemoryMiB<<20) {
		return nil, errdefs.Invalid("linux.memory_limit_in_bytes", "%d is below the VM's RAM (%d MiB)", res.GetMemoryLimitInBytes(), c.MemoryMiB)
	}
	if c.Config.Linux == nil {
		c.Config.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	c.Config.Linux.Resources = res
	if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		if err := r.Cgroups.Update(r.CgroupOf(c)); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, r.Store.PutContainer(c)
}
