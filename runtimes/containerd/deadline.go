package containerd

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runPodSandboxFactor: RunPodSandbox sets up networking and may pull the
// pause image, so it gets more time (as kubelet's own CRI client does).
const runPodSandboxFactor = 4

// callTimeout returns the deadline of one call, or 0 for none. PullImage has
// none of its own: pulls take as long as the image is large, and the caller
// (kubelet) bounds them.
func callTimeout(method string, req any, base time.Duration) time.Duration {
	switch r := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		return runPodSandboxFactor * base
	case *runtimeapi.StopContainerRequest:
		return base + time.Duration(r.GetTimeout())*time.Second
	case *runtimeapi.ExecSyncRequest:
		return base + time.Duration(r.GetTimeout())*time.Second
	case *runtimeapi.PullImageRequest, *runtimeapi.CheckpointContainerRequest, *runtimeapi.CheckpointPodRequest, *runtimeapi.RestorePodRequest:
		return 0
	}
	return base
}

// callBase is the deadline of an ordinary call, which a config reload
// changes for the calls made from then on.
type callBase struct{ ns atomic.Int64 }

func newCallBase(d time.Duration) *callBase {
	b := &callBase{}
	b.ns.Store(int64(d))
	return b
}

func (b *callBase) get() time.Duration { return time.Duration(b.ns.Load()) }

// deadlines gives each unary call its deadline; a caller's earlier
// deadline wins. A call whose caller's deadline is already the earlier
// (kubelet's, normally) gets no context of its own: a timer per call is
// work for nothing on the path of every proxied call.
func deadlines(base *callBase) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if d := callTimeout(method, req, base.get()); d > 0 && !deadlineWithin(ctx, d) {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// deadlineWithin tells whether ctx ends within d from now.
func deadlineWithin(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= d
}
