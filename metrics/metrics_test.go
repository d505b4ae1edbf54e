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

	"github.com/crimux/crimux/internal/route"
	"github.com/crimux/crimux/vmtypes"
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
	unary := m.UnaryServerInterceptor()
	// Each handler routes its call to "containerd" and records it, as the
	// CRI server and the VM API do.
	call := func(method string, err error) {
		_, _ = unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(ctx context.Context, _ any) (any, error) { route.Record(ctx, "containerd"); return nil, err })
	}
	call("/runtime.v1.RuntimeService/RunPodSandbox", nil)
	call("/runtime.v1.RuntimeService/ContainerStatus", status.Error(codes.NotFound, "x"))
	call("/crimux.vm.v1.VMService/GetVM", status.Error(codes.Unavailable, "x"))
	// A stream that records nothing fans out: "all".
	stream := m.StreamServerInterceptor()
	_ = stream(nil, fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents"},
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

// fakeStream is a server stream with only a context.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

// TestStreamSeesTheRouteSlot: a streaming handler that routes its call
// to one runtime labels it with that runtime.
func TestStreamSeesTheRouteSlot(t *testing.T) {
	m := New(Options{})
	stream := m.StreamServerInterceptor()
	_ = stream(nil, fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/StreamContainerStats"},
		func(_ any, ss grpc.ServerStream) error { route.Record(ss.Context(), "vm"); return nil })
	_, _ = m.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/StopContainer"},
		func(ctx context.Context, _ any) (any, error) { route.Record(ctx, RuntimeNone); return nil, nil })
	wantLines(t, scrape(t, m),
		`crimux_rpc_duration_seconds_count{api="cri",rpc="StreamContainerStats",runtime="vm"} 1`,
		`crimux_rpc_duration_seconds_count{api="cri",rpc="StopContainer",runtime="none"} 1`)
}

// TestCounters: what the runtimes count through GCRemoved and Reconnected
// is exported under the metric names and labels dashboards know, and each
// Metrics counts only what it was handed.
func TestCounters(t *testing.T) {
	m, other := New(Options{}), New(Options{})
	m.GCRemoved("container_cgroup", 3)
	m.GCRemoved("orphan_task", 0)
	m.GCRemoved("domain", -1) // a caller's bug: not counted, no panic
	m.GCRemoved("odd_kind", 2)
	m.Reconnected("unix:///run/containerd/containerd.sock")
	m.Reconnected("unix:///run/containerd/containerd.sock")
	wantLines(t, scrape(t, m),
		`crimux_gc_removals_total{kind="container_cgroup"} 3`,
		`crimux_gc_removals_total{kind="orphan_task"} 0`,
		`crimux_gc_removals_total{kind="domain"} 0`,
		`crimux_gc_removals_total{kind="odd_kind"} 2`,
		`crimux_reconnects_total{target="unix:///run/containerd/containerd.sock"} 2`)
	text := scrape(t, other)
	wantLines(t, text, `crimux_gc_removals_total{kind="container_cgroup"} 0`)
	if strings.Contains(text, "crimux_reconnects_total{") {
		t.Errorf("a Metrics exports another's reconnects:\n%s", text)
	}
}

// Repeated calls land in the histogram of their method and runtime, kept
// after the first call (Metrics.duration), and in no other.
func TestRepeatedCallsShareTheirHistogram(t *testing.T) {
	m := New(Options{Version: "v9"})
	unary := m.UnaryServerInterceptor()
	call := func(runtime string) {
		_, _ = unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/ContainerStatus"},
			func(ctx context.Context, _ any) (any, error) { route.Record(ctx, runtime); return nil, nil })
	}
	for _, rt := range []string{"containerd", "vm", "containerd", "containerd"} {
		call(rt)
	}
	wantLines(t, scrape(t, m),
		`crimux_rpc_duration_seconds_count{api="cri",rpc="ContainerStatus",runtime="containerd"} 3`,
		`crimux_rpc_duration_seconds_count{api="cri",rpc="ContainerStatus",runtime="vm"} 1`)
}

// TestVMSamples: each VM's series carry its namespace, pod and container
// names; a VM not running has its power state alone; a VM gone from the
// runtime has no series left.
func TestVMSamples(t *testing.T) {
	samples := []vmtypes.VMSample{
		{Namespace: "web", Pod: "db-0", Container: "vm", PowerState: "running", Running: true, CPUSeconds: 1.5,
			MemoryBytes: 1024, BlockReadBytes: 10, BlockWriteBytes: 20, NetReceiveBytes: 30, NetSendBytes: 40},
		{Namespace: "web", Pod: "db-1", Container: "vm", PowerState: "not_running"},
	}
	m := New(Options{VMSamples: func() ([]vmtypes.VMSample, error) { return samples, nil }})
	text := scrape(t, m)
	l := `{container="vm",namespace="web",pod="db-0"}`
	wantLines(t, text,
		`crimux_vm_power_state{container="vm",namespace="web",pod="db-0",power_state="running"} 1`,
		`crimux_vm_power_state{container="vm",namespace="web",pod="db-1",power_state="not_running"} 1`,
		`crimux_vm_cpu_seconds_total`+l+` 1.5`,
		`crimux_vm_memory_working_set_bytes`+l+` 1024`,
		`crimux_vm_block_read_bytes_total`+l+` 10`,
		`crimux_vm_block_write_bytes_total`+l+` 20`,
		`crimux_vm_network_receive_bytes_total`+l+` 30`,
		`crimux_vm_network_transmit_bytes_total`+l+` 40`)
	if strings.Contains(text, `crimux_vm_cpu_seconds_total{container="vm",namespace="web",pod="db-1"}`) ||
		strings.Contains(text, "crimux_vm_guest_memory_used_bytes{") {
		t.Errorf("figures of a VM not running, or a guest memory no guest reported:\n%s", text)
	}
	samples = samples[1:]
	if text := scrape(t, m); strings.Contains(text, `pod="db-0"`) {
		t.Errorf("series of a VM gone from the runtime:\n%s", text)
	}
}
