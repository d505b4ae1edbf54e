package criservice

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
)

// ContainerStatus reports the VM from the store; verbose info names the
// domain and the accelerator.
func (r *Service) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	st, err := r.StatusOf(ctx, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.GetVerbose() {
		c, err := r.Store.Container(req.GetContainerId())
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"domain":%q,"accel":%q,"vcpus":%d,"memoryMiB":%d,"dir":%q,"powerState":%q}`,
			c.Domain, c.Accel, c.VCPUs, c.MemoryMiB, c.Dir, c.Power())}
	}
	return resp, nil
}

// ListContainers lists VMs from the store (kept while libvirtd is down).
// crimux's lists ask EncodedContainers (list_encoded.go).
func (r *Service) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	recs, err := r.Store.LiveContainers()
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.Container
	for _, c := range recs {
		if item := containerItem(c); crifilter.Container(req.GetFilter(), item) {
			out = append(out, item)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}
