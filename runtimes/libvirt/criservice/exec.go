package criservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/vmtypes"
)

// ExecSync runs a command in the VM's guest through the QEMU guest agent
// (guest-exec): its output captured, its real exit code, within the
// request's timeout. So exec probes work on VM pods. A guest without an
// agent is FailedPrecondition (none configured) or Unavailable (none
// answering) within seconds, not a hang; a VM its user powered off or
// paused runs nothing (FailedPrecondition).
func (r *Service) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := r.Store.Container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %q is %s: %w", c.ID, c.State, errdefs.ErrFailedPrecondition)
	}
	if p := c.Power(); p != vmtypes.PowerRunning {
		return nil, fmt.Errorf("the VM of container %q is %s by its user: nothing runs in it: %w", c.ID, p, errdefs.ErrFailedPrecondition)
	}
	l, err := r.Conn.Get()
	if err != nil {
		return nil, err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", c.Domain, err)
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	send := func(cmd string, timeout time.Duration) (string, error) { return l.AgentCommand(dom, cmd, timeout) }
	res, err := agent.Exec(ctx, send, req.GetCmd())
	switch {
	case errors.Is(err, agent.ErrTimedOut):
		return nil, grpcstatus.Errorf(codes.DeadlineExceeded, "exec in VM %s: %v after %ds", c.ID, err, req.GetTimeout())
	case errdefs.Code(err) == codes.FailedPrecondition || errdefs.Code(err) == codes.Unavailable:
		return nil, fmt.Errorf("exec in VM %s needs the QEMU guest agent running in the guest (qemu-guest-agent): %w", c.ID, err)
	case err != nil:
		return nil, fmt.Errorf("exec in VM %s: %w", c.ID, err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}
