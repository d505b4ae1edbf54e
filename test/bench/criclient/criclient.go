// Package criclient owns the bench's CRI connections, one per path
// (crimux's socket, containerd's), and the calls both paths share:
// removing a pod, pulling an image, and running many calls at once.
package criclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CallTimeout bounds one CRI call.
const CallTimeout = 2 * time.Minute

// Endpoint is a CRI server: crimux or containerd.
type Endpoint struct {
	Name string
	Conn *grpc.ClientConn
	RT   runtimeapi.RuntimeServiceClient
	Img  runtimeapi.ImageServiceClient
}

// Dial connects to the CRI server name (for messages) at addr.
func Dial(name, addr string) (*Endpoint, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial %s at %s: %w", name, addr, err)
	}
	return &Endpoint{Name: name, Conn: conn, RT: runtimeapi.NewRuntimeServiceClient(conn), Img: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (e *Endpoint) Close() { _ = e.Conn.Close() }

// CallCtx bounds one CRI call by CallTimeout.
func CallCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout)
}

// RemovePod stops and removes a pod with its containers on e.
func RemovePod(ctx context.Context, e *Endpoint, podID string) error {
	ctx, cancel := CallCtx(ctx)
	defer cancel()
	if _, err := e.RT.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("stopp %s: %w", podID, err)
	}
	if _, err := e.RT.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("rmp %s: %w", podID, err)
	}
	return nil
}

// Pull pulls an image through e, even when e has it: the tag is resolved
// again, so that an image the bed rebuilt (new kernel arguments, say)
// replaces the one containerd kept; blobs it has are not fetched again.
func Pull(ctx context.Context, e *Endpoint, image string) error {
	ctx, cancel := CallCtx(ctx)
	defer cancel()
	if _, err := e.Img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		return fmt.Errorf("pull %s through %s: %w", image, e.Name, err)
	}
	return nil
}

// Parallel runs f(0..n-1) on workers goroutines and returns the first
// error (every call runs regardless).
func Parallel(n, workers int, f func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, n)
	for range max(1, workers) {
		go func() {
			for i := range next {
				errs <- f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
