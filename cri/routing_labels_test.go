package cri_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/metrics"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
	"github.com/crimux/crimux/vmapi"
)

// labelledServer is crimux's gRPC server as the daemon chains it (metrics
// outermost, then cri's interceptor) with the CRI server and the VM API,
// over the default runtimes plus "kata" (handler kata), each a fake on a
// socket of its own.
func labelledServer(t *testing.T) (*metrics.Metrics, *grpc.ClientConn) {
	t.Helper()
	cfg := config.Default()
	cfg.Runtimes = append(cfg.Runtimes, config.Runtime{Name: "kata", Type: config.TypeContainer, Handlers: []string{"kata"}})
	for i := range cfg.Runtimes {
		rt := &cfg.Runtimes[i]
		rt.Endpoint = crifake.Serve(t, crifake.New(rt.Name), crifake.SocketPath(t, rt.Name+".sock")).Endpoint()
	}
	factory := containerd.Factory{Defaults: cfg.Containerd}
	reg, err := registry.New(context.Background(), cfg, map[string]registry.Factory{config.TypeContainer: factory, config.TypeVM: factory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New(metrics.Options{})
	g := grpc.NewServer(grpc.ForceServerCodecV2(cri.ServerCodec{}), grpc.ChainUnaryInterceptor(m.UnaryServerInterceptor(), cri.UnaryInterceptor(log, nil)))
	server := cri.New(reg, log)
	server.Register(g)
	vmapi.New(server.Registry, log).Register(g)
	path := crifake.SocketPath(t, "crimux.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return m, conn
}

// TestRouteLabels: every call is labelled in the metrics with the runtime
// the server routed it to, recorded by the handler that routed it
// (routing.go, vmapi): RunPodSandbox by handler and annotation, calls
// naming a container or pod by ID, image calls by their image's runtime
// handler (else the primary), VM API calls to the VM runtime; "none" when
// routing failed, "all" for what fans out. (The table the metrics'
// RegistryResolver was tested with, now that the handlers decide.)
func TestRouteLabels(t *testing.T) {
	m, conn := labelledServer(t)
	tests := []struct {
		method string
		req    proto.Message
		want   string
	}{
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{RuntimeHandler: "vm"}, "vm"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{
			Config: &runtimeapi.PodSandboxConfig{Annotations: map[string]string{registry.WorkloadTypeAnnotation: "vm"}}}, "vm"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{}, "containerd"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{RuntimeHandler: "nope"}, metrics.RuntimeNone},
		{"/runtime.v1.RuntimeService/StopContainer", &runtimeapi.StopContainerRequest{ContainerId: "vm--abc"}, "vm"},
		{"/runtime.v1.RuntimeService/StopPodSandbox", &runtimeapi.StopPodSandboxRequest{PodSandboxId: "kata--abc"}, "kata"},
		{"/runtime.v1.RuntimeService/CreateContainer", &runtimeapi.CreateContainerRequest{PodSandboxId: "abc"}, "containerd"},
		{"/runtime.v1.RuntimeService/ContainerStatus", &runtimeapi.ContainerStatusRequest{}, metrics.RuntimeNone},
		{"/runtime.v1.ImageService/PullImage", &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}}, "containerd"},
		{"/runtime.v1.ImageService/PullImage", &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{RuntimeHandler: "kata"}}, "kata"},
		{"/runtime.v1.RuntimeService/ListContainers", &runtimeapi.ListContainersRequest{}, metrics.RuntimeAll},
		{"/runtime.v1.RuntimeService/Status", &runtimeapi.StatusRequest{}, metrics.RuntimeAll},
		{"/crimux.vm.v1.VMService/GetVM", nil, "vm"},
		// Beyond the old table: refused calls keep the label of the runtime
		// they name, and the VM image's handler labels an image call even
		// though the image lives in the primary's store.
		{"/runtime.v1.RuntimeService/ContainerStatus", &runtimeapi.ContainerStatusRequest{ContainerId: "vm--../x"}, "vm"},
		{"/runtime.v1.ImageService/ImageStatus", &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "disk", RuntimeHandler: "vm"}}, "vm"},
		{"/runtime.v1.RuntimeService/RestorePod", &runtimeapi.RestorePodRequest{}, metrics.RuntimeAll},
		{"/crimux.vm.v1.VMService/ListVMs", nil, "vm"},
	}
	counts := map[string]int{}
	for _, tt := range tests {
		req := tt.req
		if req == nil {
			req = &emptypb.Empty{}
		}
		_ = conn.Invoke(ctx(t), tt.method, req, &emptypb.Empty{}) // the outcome does not matter, the label does
		api, rpc := "cri", tt.method[strings.LastIndex(tt.method, "/")+1:]
		if strings.HasPrefix(tt.method, "/crimux.vm.") {
			api = "vm"
		}
		line := fmt.Sprintf(`crimux_rpc_duration_seconds_count{api=%q,rpc=%q,runtime=%q}`, api, rpc, tt.want)
		counts[line]++
		if text := scrape(m); !strings.Contains(text, fmt.Sprintf("%s %d\n", line, counts[line])) {
			t.Errorf("%s %v: want the call counted as %s %d; the metrics have:\n%s", tt.method, tt.req, line, counts[line], grepLines(text, rpc))
		}
	}
}

func scrape(m *metrics.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// grepLines are the call-count lines of text that name rpc.
func grepLines(text, rpc string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "crimux_rpc_duration_seconds_count{") && strings.Contains(l, fmt.Sprintf("rpc=%q", rpc)) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
