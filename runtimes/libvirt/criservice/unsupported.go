package criservice

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func notForVMs(what string) error {
	return fmt.Errorf("%s is not supported for VM pods: %w", what, errdefs.ErrUnimplemented)
}

// ExecSync: a VM has no container to exec into (no guest agent).
func (r *Service) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return nil, notForVMs("exec")
}

// Exec: as ExecSync.
func (r *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, notForVMs("exec")
}

// PortForward needs the pod network, which VM pods do not have yet.
func (r *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, notForVMs("port-forward")
}
