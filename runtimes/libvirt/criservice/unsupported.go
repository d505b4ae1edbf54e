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

// Exec (streaming) is not served for VMs yet: ExecSync is (exec.go).
func (r *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, notForVMs("streaming exec (crictl exec -it, kubectl exec -it)")
}

// PortForward needs the pod network, which VM pods do not have yet.
func (r *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, notForVMs("port-forward")
}
