package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// wantCode fails unless err is a gRPC error with code and a message that
// contains every one of words.
func wantCode(t *testing.T, err error, code codes.Code, words ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
	for _, w := range words {
		if !strings.Contains(st.Message(), w) {
			t.Fatalf("message %q does not name %q", st.Message(), w)
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestBadInputThroughCrimux: each bad request is a clear gRPC error naming
// the field, and crimux keeps serving afterwards.
func TestBadInputThroughCrimux(t *testing.T) {
	parallel(t)
	requireBed(t)
	c := startCrimux(t, bed.containerd)
	rs, is := c.client()
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "bad", Namespace: "crimux-e2e", Uid: "bad-uid"}}

	t.Run("unknown RuntimeClass handler", func(t *testing.T) {
		_, err := rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "no-such-handler"})
		wantCode(t, err, codes.InvalidArgument, "runtime_handler", "no-such-handler")
		out, err := c.crictlErr("runp", "--runtime", "no-such-handler", podJSON(t, "badhandler", ""))
		if err == nil || !strings.Contains(out, "no-such-handler") {
			t.Fatalf("crictl runp with an unknown handler: err %v, output %q", err, out)
		}
	})
	t.Run("unknown workload-type annotation", func(t *testing.T) {
		cfg := &runtimeapi.PodSandboxConfig{Metadata: podCfg.Metadata, Annotations: map[string]string{"crimux.io/workload-type": "toaster"}}
		_, err := rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		wantCode(t, err, codes.InvalidArgument, "crimux.io/workload-type", "toaster")
	})
	t.Run("missing config", func(t *testing.T) {
		_, err := rs.RunPodSandbox(ctx(t), &runtimeapi.RunPodSandboxRequest{})
		wantCode(t, err, codes.InvalidArgument, "config")
		_, err = rs.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{PodSandboxId: "abc"})
		wantCode(t, err, codes.InvalidArgument, "config")
	})
	for _, id := range []string{"", "../../etc/passwd", "a/b", "id with spaces", strings.Repeat("a", 300), ".."} {
		t.Run("malformed container ID "+abbrev(id), func(t *testing.T) {
			_, err := rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			wantCode(t, err, codes.InvalidArgument, "container_id")
			_, err = rs.StopPodSandbox(ctx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			wantCode(t, err, codes.InvalidArgument, "pod_sandbox_id")
		})
	}
	t.Run("unknown IDs", func(t *testing.T) {
		_, err := rs.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: "0123456789abcdef"})
		wantCode(t, err, codes.NotFound)
		_, err = rs.PodSandboxStatus(ctx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "0123456789abcdef"})
		wantCode(t, err, codes.NotFound)
		// Stop and Remove of unknown IDs succeed: they are idempotent.
		if _, err := rs.StopContainer(ctx(t), &runtimeapi.StopContainerRequest{ContainerId: "0123456789abcdef"}); err != nil {
			t.Fatalf("StopContainer of an unknown ID: %v", err)
		}
		if _, err := rs.RemovePodSandbox(ctx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "0123456789abcdef"}); err != nil {
			t.Fatalf("RemovePodSandbox of an unknown ID: %v", err)
		}
	})
	t.Run("empty image", func(t *testing.T) {
		_, err := is.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{}})
		wantCode(t, err, codes.InvalidArgument, "image")
	})
	if !c.alive() {
		t.Fatal("crimux exited after bad input")
	}
	if _, err := rs.Version(ctx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("crimux stopped serving after bad input: %v", err)
	}
}

func abbrev(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

func statusCode(err error) codes.Code {
	st, _ := status.FromError(err)
	return st.Code()
}
