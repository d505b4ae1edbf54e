package inproc

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
)

// An empty ListContainers of a runtime in this process, as every list
// asks the VM runtime: called directly or over an in-memory gRPC
// connection (go test -bench . ./internal/inproc).
func BenchmarkEmptyList(b *testing.B) {
	f := crifake.New("vm")
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///vm", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		name string
		conn grpc.ClientConnInterface
	}{
		{"bufconn", conn},
		{"inproc", New(&runtimeapi.RuntimeService_ServiceDesc, f, nil, nil, conn)},
	} {
		b.Run(c.name, func(b *testing.B) {
			rs := runtimeapi.NewRuntimeServiceClient(c.conn)
			ctx := context.Background()
			for b.Loop() {
				if _, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
