package criservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// PortForward (crictl port-forward, kubectl port-forward) connects to the
// guest: the VM owns the pod IP (podnet), so each forwarded connection is
// a TCP connection to <pod IP>:<port> (dialGuest: the other addresses of
// a dual-stack pod if that fails). It is dialled from the node's
// network namespace — the pod's own namespace holds no address once the
// guest has taken it, and the Kubernetes network model guarantees the
// node reaches its pods' IPs (kubelet's TCP and HTTP probes rely on it).
// Only the pod's own IP is ever dialled.
func (r *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	for i, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, errdefs.Invalid(fmt.Sprintf("port[%d]", i), "%d is not a TCP port", p)
		}
	}
	if _, err := r.guestAddrs(req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if r.streaming == nil {
		return nil, fmt.Errorf("port-forward: streaming server not running: %w", errdefs.ErrUnavailable)
	}
	return r.streaming.GetPortForward(req)
}

// guestAddrs are the addresses of a ready VM pod, the pod IP first.
func (r *Service) guestAddrs(sandboxID string) ([]string, error) {
	sb, err := r.Store.LiveSandbox(sandboxID)
	if err != nil {
		return nil, err
	}
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, fmt.Errorf("pod sandbox %q is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	if sb.Net == nil || !sb.Net.Ready || sb.Net.IP == "" {
		return nil, fmt.Errorf("pod sandbox %q has no pod network to forward to (host network or none): %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	var out []string
	for _, a := range sb.Net.Addresses() {
		out = append(out, a.IP)
	}
	return out, nil
}

// dialGuest connects to port on the first of the guest's addresses that
// answers: the pod IP (IPv4 on a dual-stack pod, as containerd picks it),
// then the others — an IPv6-only pod is dialled over IPv6, and a guest
// listening on IPv6 alone is still reached on a dual-stack pod.
func dialGuest(ctx context.Context, addrs []string, port int32) (net.Conn, error) {
	var d net.Dialer
	var errs []error
	for _, ip := range addrs {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// forwardPort joins stream to a new connection to the guest's port until
// either side ends.
func (r *Service) forwardPort(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	addrs, err := r.guestAddrs(sandboxID)
	if err != nil {
		return err
	}
	conn, err := dialGuest(ctx, addrs, port)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s port %d: %w", sandboxID, port, err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, stream)
		// The client is done sending: let the guest see end of file.
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	_ = stream.Close()
	_ = conn.Close()
	wg.Wait()
	return err
}
