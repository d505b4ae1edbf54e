package containerd

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCallTimeoutReloaded: a call made after SetCallTimeout gets the new
// deadline (a reload of containerd.call_timeout), RunPodSandbox four
// times it; a new value of 0 is ignored.
func TestCallTimeoutReloaded(t *testing.T) {
	b := &Backend{base: newCallBase(2 * time.Minute)}
	intercept := deadlines(b.base)
	deadlineOf := func(req any) time.Duration {
		var left time.Duration
		_ = intercept(context.Background(), "/m", req, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			dl, _ := ctx.Deadline()
			left = time.Until(dl)
			return nil
		})
		return left
	}
	if d := deadlineOf(&runtimeapi.ContainerStatusRequest{}); d < 119*time.Second || d > 2*time.Minute {
		t.Fatalf("deadline %s before the reload, want 2m", d)
	}
	b.SetCallTimeout(10 * time.Second)
	if d := deadlineOf(&runtimeapi.ContainerStatusRequest{}); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("deadline %s after SetCallTimeout(10s)", d)
	}
	if d := deadlineOf(&runtimeapi.RunPodSandboxRequest{}); d < 39*time.Second || d > 40*time.Second {
		t.Fatalf("RunPodSandbox's deadline %s after SetCallTimeout(10s), want 40s", d)
	}
	b.SetCallTimeout(0)
	if d := deadlineOf(&runtimeapi.ContainerStatusRequest{}); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("deadline %s after SetCallTimeout(0), want 10s kept", d)
	}
}
