package criservice

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// Exec (crictl exec, kubectl exec) runs a command in the guest through
// the QEMU guest agent, as ExecSync does, over the streaming server: the
// client's stdin, read to its end (at most agent.MaxInput), is the
// command's standard input; its stdout and stderr reach the client when
// it exits, with its exit code. The agent has no terminal and no live
// output, so an exec with a TTY is refused pointing at what gives one:
// the serial console (crictl attach) and SSH.
func (r *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if req.GetTty() {
		return nil, fmt.Errorf("exec with a TTY is not available in a VM (its guest agent has no terminal): "+
			"use crictl attach / kubectl attach for the serial console, or SSH to the guest: %w", errdefs.ErrFailedPrecondition)
	}
	if len(req.GetCmd()) == 0 || req.GetCmd()[0] == "" {
		return nil, errdefs.Invalid("cmd", "must name a command")
	}
	if _, err := r.execTarget(req.GetContainerId()); err != nil {
		return nil, err
	}
	if r.streaming == nil {
		return nil, fmt.Errorf("exec: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	return r.streaming.GetExec(req)
}

// execTarget is the container an exec may run in: a running VM its user
// has not powered off or paused.
func (r *Service) execTarget(id string) (*store.Container, error) {
	c, err := r.Store.Container(id)
	if err != nil {
		return nil, err
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %q is %s: %w", c.ID, c.State, errdefs.ErrFailedPrecondition)
	}
	if p := c.Power(); p != vmtypes.PowerRunning {
		return nil, fmt.Errorf("the VM of container %q is %s by its user: nothing runs in it: %w", c.ID, p, errdefs.ErrFailedPrecondition)
	}
	return c, nil
}

// streamExec serves one exec stream.
func (r *Service) streamExec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool) error {
	if tty {
		return fmt.Errorf("exec with a TTY is not available in a VM: use attach or SSH: %w", errdefs.ErrFailedPrecondition)
	}
	var input []byte
	if in != nil {
		var err error
		if input, err = io.ReadAll(io.LimitReader(in, agent.MaxInput+1)); err != nil {
			return fmt.Errorf("exec in VM %s: read stdin: %w", id, err)
		}
	}
	res, err := r.agentExec(ctx, id, cmd, input)
	if err != nil {
		return err
	}
	for _, o := range []struct {
		w    io.Writer
		data []byte
	}{{out, res.Stdout}, {errw, res.Stderr}} {
		if o.w != nil && len(o.data) > 0 {
			if _, err := o.w.Write(o.data); err != nil {
				return err
			}
		}
	}
	if res.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command exited with %d", res.ExitCode), Code: int(res.ExitCode)}
	}
	return nil
}

// agentExec runs cmd in the guest of container id through its agent.
func (r *Service) agentExec(ctx context.Context, id string, cmd []string, input []byte) (agent.Result, error) {
	c, err := r.execTarget(id)
	if err != nil {
		return agent.Result{}, err
	}
	l, err := r.Conn.Get()
	if err != nil {
		return agent.Result{}, err
	}
	dom, err := l.Lookup(c.Domain)
	if err != nil {
		return agent.Result{}, fmt.Errorf("domain %s: %w", c.Domain, err)
	}
	res, err := agent.ExecInput(ctx, agent.SendTo(l, dom), cmd, input)
	if err != nil && (errdefs.Code(err) == codes.FailedPrecondition || errdefs.Code(err) == codes.Unavailable) {
		// The guest's state, not the runtime's: FailedPrecondition, so that
		// nobody reads "runtime unavailable" into it.
		return res, fmt.Errorf("exec in VM %s needs the QEMU guest agent running in the guest (qemu-guest-agent): %v: %w",
			c.ID, err, errdefs.ErrFailedPrecondition)
	}
	return res, err
}
