package criservice

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// A streaming server of crimux's own serves what CRI streams for VMs
// (kubelet and crictl speak the same protocols to it as to containerd's):
// Attach joins the console socket qemu listens on to the client's stdin
// and stdout; Exec runs a command through the guest agent (exec_stream.go);
// PortForward connects to the guest (portforward.go).

// startStreaming listens on addr (host:port; port 0 picks one) and serves
// attach streams until ctx ends.
func (r *Service) startStreaming(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("streaming server: %w", err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = lis.Addr().String()
	srv, err := streaming.NewServer(cfg, consoleStreams{r})
	if err != nil {
		lis.Close()
		return err
	}
	r.streaming = srv
	hs := &http.Server{Handler: srv}
	go func() { _ = hs.Serve(lis) }()
	go func() { <-ctx.Done(); hs.Close() }()
	return nil
}

// Attach returns the streaming URL of the VM's console.
func (r *Service) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, err := r.Store.Container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %q is not running: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if r.streaming == nil {
		return nil, fmt.Errorf("attach: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	return r.streaming.GetAttach(req)
}

// consoleStreams is the streaming server's view of the runtime.
type consoleStreams struct{ r *Service }

func (s consoleStreams) Attach(ctx context.Context, id string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommandserver.TerminalSize) error {
	c, err := s.r.Store.Container(id)
	if err != nil {
		return err
	}
	conn, err := vmfiles.DialConsole(ctx, c.Dir)
	if err != nil {
		return fmt.Errorf("connect to the console of %s: %w", c.Domain, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	if in != nil {
		go func() { _, _ = io.Copy(conn, in); done <- struct{}{} }()
	}
	if out != nil {
		go func() { _, _ = io.Copy(out, conn); done <- struct{}{} }()
	}
	select {
	case <-ctx.Done():
	case <-done:
	}
	return nil
}

func (s consoleStreams) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan remotecommandserver.TerminalSize) error {
	return s.r.streamExec(ctx, id, cmd, in, out, errw, tty)
}

func (s consoleStreams) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	return s.r.forwardPort(ctx, sandboxID, port, stream)
}
