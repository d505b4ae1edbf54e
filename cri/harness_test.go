package cri_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
)

// harness is crimux as kubelet sees it: a cri.Server with its interceptors
// on a real unix socket, in front of two fake runtimes on their own
// sockets. "containerd" is primary (handler runc); "vm" (handler vm) is
// reached through containerd.Dial with the ID codec, as the registry wires
// every non-primary runtime.
type harness struct {
	ctrd, vm       *crifake.Fake
	ctrdSrv, vmSrv *crifake.Server
	reg            *registry.Registry
	rs             runtimeapi.RuntimeServiceClient
	is             runtimeapi.ImageServiceClient
	conn           *grpc.ClientConn
	logs           *testutil.SyncBuffer

	mu       sync.Mutex
	observed []observation
}

type observation struct {
	method string
	code   codes.Code
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWithTimeout(t, 5*time.Second)
}

// newHarnessWithTimeout sets the backends' call_timeout.
func newHarnessWithTimeout(t *testing.T, callTimeout time.Duration) *harness {
	t.Helper()
	return newHarnessWith(t, callTimeout, nil)
}

// newHarnessWith sets the backends' call_timeout and, unless wrapVM is
// nil, gives the VM runtime the backend wrapVM makes of its own (one
// with abilities beyond CRI).
func newHarnessWith(t *testing.T, callTimeout time.Duration, wrapVM func(registry.Backend) registry.Backend) *harness {
	t.Helper()
	h := &harness{ctrd: crifake.New("ctrd"), vm: crifake.New("vm"), logs: &testutil.SyncBuffer{}}
	h.ctrdSrv = crifake.Serve(t, h.ctrd, crifake.SocketPath(t, "containerd.sock"))
	h.vmSrv = crifake.Serve(t, h.vm, crifake.SocketPath(t, "vm.sock"))

	cfg := config.Default()
	cfg.Containerd.Endpoint = h.ctrdSrv.Endpoint()
	cfg.Containerd.CallTimeout = config.Duration{Duration: callTimeout}
	cfg.Runtimes = []config.Runtime{
		{Name: "containerd", Type: config.TypeContainer, Handlers: []string{"runc"}, Primary: true},
		{Name: "vm", Type: config.TypeVM, Handlers: []string{"vm"}, Endpoint: h.vmSrv.Endpoint()},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	factory := containerd.Factory{Defaults: cfg.Containerd}
	var vmFactory registry.Factory = factory
	if wrapVM != nil {
		vmFactory = wrappingFactory{factory, wrapVM}
	}
	reg, err := registry.New(context.Background(), cfg, map[string]registry.Factory{
		config.TypeContainer: factory, config.TypeVM: vmFactory,
	})
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(reg.Close)
	h.reg = reg

	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	observe := func(method string, _ time.Duration, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.observed = append(h.observed, observation{method, status.Code(err)})
	}
	g := grpc.NewServer(
		grpc.ForceServerCodecV2(cri.ServerCodec{}),
		grpc.ChainUnaryInterceptor(cri.UnaryInterceptor(log, observe)),
		grpc.ChainStreamInterceptor(cri.StreamInterceptor(log, observe)),
	)
	srv := cri.New(reg, log)
	srv.ReserveIDs(cri.IDRange{First: cfg.Libvirt.VMIDBase, End: cfg.Libvirt.VMIDBase + cfg.Libvirt.VMIDCount})
	srv.Register(g)
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
	h.conn = conn
	h.rs = runtimeapi.NewRuntimeServiceClient(conn)
	h.is = runtimeapi.NewImageServiceClient(conn)
	return h
}

// wrappingFactory makes its factory's backends and wraps them.
type wrappingFactory struct {
	registry.Factory
	wrap func(registry.Backend) registry.Backend
}

func (f wrappingFactory) New(ctx context.Context, rt config.Runtime, codec *idcodec.Codec) (registry.Backend, error) {
	b, err := f.Factory.New(ctx, rt, codec)
	if err != nil {
		return nil, err
	}
	return f.wrap(b), nil
}

// seed gives both runtimes a pod "p1" with a container "c1" (the same
// runtime-local IDs on purpose: only routing tells them apart), and
// containerd a second, stopped pod.
func (h *harness) seed() {
	h.ctrd.AddSandboxes(
		&runtimeapi.PodSandbox{Id: "p1", Metadata: podMeta("web"), State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: map[string]string{"app": "web"}},
		&runtimeapi.PodSandbox{Id: "p2", Metadata: podMeta("db"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Labels: map[string]string{"app": "db"}},
	)
	h.ctrd.AddContainers(
		&runtimeapi.Container{Id: "c1", PodSandboxId: "p1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{"app": "web"}, ImageRef: "sha256:web"},
		&runtimeapi.Container{Id: "c2", PodSandboxId: "p2", State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: map[string]string{"app": "db"}, ImageRef: "sha256:db"},
	)
	h.vm.AddSandboxes(
		&runtimeapi.PodSandbox{Id: "p1", Metadata: podMeta("fedora"), State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: map[string]string{"app": "vm"}},
	)
	h.vm.AddContainers(
		&runtimeapi.Container{Id: "c1", PodSandboxId: "p1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{"app": "vm"}, ImageRef: "sha256:disk"},
	)
}

func podMeta(name string) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"}
}

func podConfig(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Metadata: podMeta(name), Annotations: annotations}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantCode checks err's gRPC code and that its message contains every
// substring.
func wantCode(t *testing.T, err error, code codes.Code, substrings ...string) {
	t.Helper()
	s := status.Convert(err)
	if s.Code() != code {
		t.Errorf("code = %v (%v), want %v", s.Code(), err, code)
		return
	}
	for _, sub := range substrings {
		if !strings.Contains(s.Message(), sub) {
			t.Errorf("message %q does not contain %q", s.Message(), sub)
		}
	}
	if strings.Contains(s.Message(), "rpc error: code =") {
		t.Errorf("message %q carries a nested rpc error prefix", s.Message())
	}
}

// sandboxIDs and containerIDs are the IDs of a list, in order.
func sandboxIDs(items []*runtimeapi.PodSandbox) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.Id
	}
	return ids
}

func containerIDs(items []*runtimeapi.Container) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.Id
	}
	return ids
}

func sameIDs(got, want []string) bool {
	return strings.Join(got, ",") == strings.Join(want, ",")
}

// stopVM makes the VM runtime go away, as if it crashed.
func (h *harness) stopVM() { h.vmSrv.Stop() }
