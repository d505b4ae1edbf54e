package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/registry"
)

// scrape returns the text exposition of m.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l+"\n") {
			t.Errorf("metrics lack the line %q", l)
		}
	}
}

func TestInterceptorLabels(t *testing.T) {
	m := New(Options{Version: "v9"})
	resolve := func(method string, req any) string { return "containerd" }
	unary := m.UnaryServerInterceptor(resolve)
	call := func(method string, err error) {
		_, _ = unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(context.Context, any) (any, error) { return nil, err })
	}
	call("/runtime.v1.RuntimeService/RunPodSandbox", nil)
	call("/runtime.v1.RuntimeService/ContainerStatus", status.Error(codes.NotFound, "x"))
	call("/crimux.vm.v1.VMService/GetVM", status.Error(codes.Unavailable, "x"))
	stream := m.StreamServerInterceptor(func(string, any) string { return RuntimeAll })
	_ = stream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents"},
		func(any, grpc.ServerStream) error { return nil })

	text := scrape(t, m)
	wantLines(t, text,
		`crimux_rpc_duration_seconds_count{api="cri",rpc="RunPodSandbox",runtime="containerd"} 1`,
		`crimux_rpc_duration_seconds_count{api="vm",rpc="GetVM",runtime="containerd"} 1`,
		`crimux_rpc_duration_seconds_count{api="cri",rpc="GetContainerEvents",runtime="all"} 1`,
		`crimux_rpc_errors_total{api="cri",code="NotFound",rpc="ContainerStatus",runtime="containerd"} 1`,
		`crimux_rpc_errors_total{api="vm",code="Unavailable",rpc="GetVM",runtime="containerd"} 1`,
		`crimux_build_info{version="v9"} 1`,
		`crimux_vms{power_state="running"} 0`,
		`crimux_config_reloads_total{result="failure"} 0`,
	)
	if strings.Contains(text, `rpc_errors_total{api="cri",code="OK"`) {
		t.Error("a successful call was counted as an error")
	}
	wantLines(t, text, `crimux_gc_removals_total{kind="domain"} 0`)
}

func TestVMCollector(t *testing.T) {
	m := New(Options{VMPowerStates: func() (map[string]int, error) {
		return map[string]int{"running": 2, "hibernate": 1, "odd": 1}, nil
	}})
	wantLines(t, scrape(t, m),
		`crimux_vms{power_state="running"} 2`,
		`crimux_vms{power_state="hibernate"} 1`,
		`crimux_vms{power_state="paused"} 0`,
		`crimux_vms{power_state="odd"} 1`)

	// A failing VM runtime leaves every other metric served.
	m = New(Options{Version: "v1", VMPowerStates: func() (map[string]int, error) { return nil, errors.New("libvirtd gone") }})
	text := scrape(t, m)
	wantLines(t, text, `crimux_build_info{version="v1"} 1`)
	if strings.Contains(text, "crimux_vms{") {
		t.Errorf("VM counts served although the runtime failed:\n%s", text)
	}
}

func TestSetRuntimeReadyForgetsRemovedRuntimes(t *testing.T) {
	m := New(Options{})
	m.SetRuntimeReady([]RuntimeReadiness{{"containerd", "container", true}, {"vm", "vm", false}})
	wantLines(t, scrape(t, m), `crimux_runtime_ready{runtime="containerd",type="container"} 1`, `crimux_runtime_ready{runtime="vm",type="vm"} 0`)
	m.SetRuntimeReady([]RuntimeReadiness{{"containerd", "container", true}})
	if text := scrape(t, m); strings.Contains(text, `runtime="vm"`) {
		t.Errorf("a removed runtime is still exported:\n%s", text)
	}
}

// nopBackend is a backend no call reaches.
type nopBackend struct{}

func (nopBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (nopBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (nopBackend) Close() error                             { return nil }

type nopFactory struct{}

func (nopFactory) Key(rt config.Runtime) string { return rt.Name }
func (nopFactory) New(context.Context, config.Runtime, *idcodec.Codec) (registry.Backend, error) {
	return nopBackend{}, nil
}

func TestRegistryResolver(t *testing.T) {
	cfg := config.Default()
	cfg.Runtimes = append(cfg.Runtimes, config.Runtime{Name: "kata", Type: config.TypeContainer, Handlers: []string{"kata"}})
	reg, err := registry.New(context.Background(), cfg, map[string]registry.Factory{config.TypeContainer: nopFactory{}, config.TypeVM: nopFactory{}})
	if err != nil {
		t.Fatal(err)
	}
	resolve := RegistryResolver(func() *registry.Registry { return reg })
	tests := []struct {
		method string
		req    any
		want   string
	}{
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{RuntimeHandler: "vm"}, "vm"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{
			Config: &runtimeapi.PodSandboxConfig{Annotations: map[string]string{registry.WorkloadTypeAnnotation: "vm"}}}, "vm"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{}, "containerd"},
		{"/runtime.v1.RuntimeService/RunPodSandbox", &runtimeapi.RunPodSandboxRequest{RuntimeHandler: "nope"}, RuntimeNone},
		{"/runtime.v1.RuntimeService/StopContainer", &runtimeapi.StopContainerRequest{ContainerId: "vm--abc"}, "vm"},
		{"/runtime.v1.RuntimeService/StopPodSandbox", &runtimeapi.StopPodSandboxRequest{PodSandboxId: "kata--abc"}, "kata"},
		{"/runtime.v1.RuntimeService/CreateContainer", &runtimeapi.CreateContainerRequest{PodSandboxId: "abc"}, "containerd"},
		{"/runtime.v1.RuntimeService/ContainerStatus", &runtimeapi.ContainerStatusRequest{}, RuntimeNone},
		{"/runtime.v1.ImageService/PullImage", &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}}, "containerd"},
		{"/runtime.v1.ImageService/PullImage", &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{RuntimeHandler: "kata"}}, "kata"},
		{"/runtime.v1.RuntimeService/ListContainers", &runtimeapi.ListContainersRequest{}, RuntimeAll},
		{"/runtime.v1.RuntimeService/Status", &runtimeapi.StatusRequest{}, RuntimeAll},
		{"/crimux.vm.v1.VMService/GetVM", nil, "vm"},
	}
	for _, tt := range tests {
		if got := resolve(tt.method, tt.req); got != tt.want {
			t.Errorf("%s %v: runtime %q, want %q", tt.method, tt.req, got, tt.want)
		}
	}
}

func TestSplitMethod(t *testing.T) {
	for method, want := range map[string][2]string{
		"/runtime.v1.RuntimeService/Version": {"cri", "Version"},
		"/runtime.v1.ImageService/PullImage": {"cri", "PullImage"},
		"/crimux.vm.v1.VMService/RebootVM":   {"vm", "RebootVM"},
		"/grpc.health.v1.Health/Check":       {"grpc.health.v1.Health", "Check"},
		"nonsense":                           {"unknown", "nonsense"},
	} {
		if api, rpc := splitMethod(method); api != want[0] || rpc != want[1] {
			t.Errorf("splitMethod(%q) = %q, %q; want %q", method, api, rpc, want)
		}
	}
}
