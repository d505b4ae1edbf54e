package rawproxy

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
)

// TestForward sends unary and streaming calls through the proxy to a fake
// runtime: answers, errors and streams arrive as the runtime sent them.
func TestForward(t *testing.T) {
	f := crifake.New("t")
	up := crifake.Serve(t, f, crifake.SocketPath(t, "up.sock"))
	p, err := Start(filepath.Join(t.TempDir(), "proxy.sock"), up.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("unary answer", func(t *testing.T) {
		v, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil || v.GetRuntimeName() == "" {
			t.Fatalf("Version = %v, %v", v, err)
		}
		if call, ok := f.LastCall("Version"); !ok || call.Deadline.IsZero() {
			t.Errorf("Version reached the runtime without the caller's deadline: %+v, %v", call, ok)
		}
	})
	t.Run("a request's fields arrive", func(t *testing.T) {
		_, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "abc"})
		if status.Code(err) != codes.NotFound {
			t.Errorf("StopContainer of an unknown ID = %v, want NotFound as the runtime answered", err)
		}
		call, ok := f.LastCall("StopContainer")
		if !ok || call.Request.(*runtimeapi.StopContainerRequest).GetContainerId() != "abc" {
			t.Errorf("runtime saw %+v, %v", call, ok)
		}
	})
	t.Run("errors pass with code and message", func(t *testing.T) {
		f.SetError("ListContainers", status.Error(codes.Internal, "boom"))
		defer f.SetError("ListContainers", nil)
		_, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != "boom" {
			t.Errorf("ListContainers = %v, want Internal boom", err)
		}
	})
	t.Run("large answers", func(t *testing.T) {
		var items []*runtimeapi.Container
		for i := range 2000 {
			items = append(items, &runtimeapi.Container{Id: fmt.Sprintf("c%04d", i), PodSandboxId: "p",
				Labels: map[string]string{"n": "0123456789012345678901234567890123456789"}})
		}
		f.AddContainers(items...)
		r, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil || len(r.GetContainers()) != len(items) {
			t.Fatalf("ListContainers: %d items, %v; want %d", len(r.GetContainers()), err, len(items))
		}
	})
	t.Run("server streams", func(t *testing.T) {
		f.SetEvents(&runtimeapi.ContainerEventResponse{ContainerId: "e1"}, &runtimeapi.ContainerEventResponse{ContainerId: "e2"})
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		st, err := rs.GetContainerEvents(sctx, &runtimeapi.GetEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"e1", "e2"} {
			ev, err := st.Recv()
			if err != nil || ev.GetContainerId() != want {
				t.Fatalf("event = %v, %v; want %s", ev, err, want)
			}
		}
	})
}
