package criservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog reopens the VM's CRI log file.
func (r *Service) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	if _, err := r.Store.Container(req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, r.Console.Reopen(req.GetContainerId())
}
