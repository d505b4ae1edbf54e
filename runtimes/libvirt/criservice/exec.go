package criservice

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/agent"
)

// ExecSync runs a command in the VM's guest through the QEMU guest agent
// (guest-exec): its output captured, its real exit code, within the
// request's timeout. So exec probes work on VM pods. A guest without an
// agent is FailedPrecondition (none configured) or Unavailable (none
// answering) within seconds, not a hang; a VM its user powered off or
// paused runs nothing (FailedPrecondition).
func (r *Service) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	res, err := r.agentExec(ctx, req.GetContainerId(), req.GetCmd(), nil)
	switch {
	case errors.Is(err, agent.ErrTimedOut):
		return nil, grpcstatus.Errorf(codes.DeadlineExceeded, "exec in VM %s: %v after %ds", req.GetContainerId(), err, req.GetTimeout())
	case err != nil:
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}
