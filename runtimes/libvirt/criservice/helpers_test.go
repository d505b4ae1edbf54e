package criservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/migrate"
	"github.com/crimux/crimux/runtimes/libvirt/resize"
	"github.com/crimux/crimux/runtimes/libvirt/rootdisk"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmstats"
	"github.com/crimux/crimux/vmtypes"
)

var (
	errUnavailable = fmt.Errorf("libvirtd: connection refused: %w", errdefs.ErrUnavailable)
	errBoom        = errors.New("boom")
)

// newService is the CRI face of a runtime core on fakes, its migration
// room, its root disks' room and its resize room wired as the runtime
// wires them.
func newService(t testing.TB, opts ...coretest.Options) (*Service, *coretest.Env) {
	t.Helper()
	e := coretest.New(t, opts...)
	s := serviceOn(e)
	arrivals := migrate.New(e.R)
	arrivals.RootVolumes = s.RootDisks.(*rootdisk.Room)
	s.Arrivals = arrivals
	s.Resizer = resize.New(resize.CoreOf(e.R))
	return s, e
}

// serviceOn is the CRI face of core e, its root disks' room wired as the
// runtime wires it (the core asks it before a start too), and its meter.
func serviceOn(e *coretest.Env) *Service {
	s := New(e.R)
	s.Meter = vmstats.New(vmstats.CoreOf(e.R))
	disks := rootdisk.New(rootdisk.CoreOf(e.R))
	e.R.RootDisks, s.RootDisks = disks, disks
	return s
}

// roomOf is the migration room wired to s.
func roomOf(s *Service) *migrate.Room { return s.Arrivals.(*migrate.Room) }

// podConfig is what kubelet sends for a VM pod.
func podConfig(t *testing.T, name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name + "-uid"},
		LogDirectory: t.TempDir(),
		Labels:       map[string]string{"app": name},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/pod" + name},
	}
}

// vmConfig is a VM container of memMiB of RAM, with a CPU quota of
// quota/period.
func vmConfig(memMiB int64, quota, period int64) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "vm"},
		Image:    &runtimeapi.ImageSpec{Image: "registry.example/vm:1"},
		Labels:   map[string]string{"role": "vm"},
		LogPath:  "vm/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			MemoryLimitInBytes: memMiB << 20, CpuQuota: quota, CpuPeriod: period}},
	}
}

func runPod(t *testing.T, s *Service, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId
}

func createVM(t *testing.T, s *Service, sbID string, sbCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	if cfg.LogPath != "" { // kubelet makes the container's log dir before it creates the container
		if err := os.MkdirAll(filepath.Dir(filepath.Join(sbCfg.LogDirectory, cfg.LogPath)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sbID, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return resp.ContainerId
}

func startVM(t *testing.T, s *Service, id string) {
	t.Helper()
	if _, err := s.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

// runningVM runs a pod and a VM in it through CRI; it returns both IDs.
func runningVM(t *testing.T, s *Service, name string) (string, string) {
	t.Helper()
	cfg := podConfig(t, name)
	sb := runPod(t, s, cfg)
	id := createVM(t, s, sb, cfg, vmConfig(256, 0, 0))
	startVM(t, s, id)
	return sb, id
}

func status(t *testing.T, s *Service, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := s.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus(%s): %v", id, err)
	}
	return resp.Status
}

// putVM records pod sbID with VM id, as coretest leaves them.
func putVM(t *testing.T, e *coretest.Env, sbID, id string, state runtimeapi.ContainerState, power vmtypes.PowerState) *store.Container {
	t.Helper()
	e.PutPod(t, sbID, nil)
	return e.PutVM(t, sbID, id, state, power)
}

func domainState(t *testing.T, e *coretest.Env, name string) virt.State {
	t.Helper()
	d, ok := e.Libvirt.Domain(name)
	if !ok {
		t.Fatalf("no domain %s", name)
	}
	return d.State
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// vmDirs lists the VM directories under the state dir.
func vmDirs(t *testing.T, e *coretest.Env) []string {
	t.Helper()
	ents, err := os.ReadDir(e.Dir + "/vms")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		out = append(out, d.Name())
	}
	return out
}

// wantCode fails the test unless err has code and names words.
func wantCode(t *testing.T, what string, err error, code codes.Code, words string) {
	t.Helper()
	if errdefs.Code(err) != code || err == nil || !strings.Contains(err.Error(), words) {
		t.Fatalf("%s: %v (%s), want %s naming %q", what, err, errdefs.Code(err), code, words)
	}
}

// eventStream is a GetContainerEvents stream that records what it is
// sent.
type eventStream struct {
	grpc.ServerStream
	ctx  context.Context
	mu   sync.Mutex
	sent []*runtimeapi.ContainerEventResponse
	fail error
}

func (s *eventStream) Context() context.Context { return s.ctx }

func (s *eventStream) Send(ev *runtimeapi.ContainerEventResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.sent = append(s.sent, ev)
	return nil
}

func (s *eventStream) events() []*runtimeapi.ContainerEventResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*runtimeapi.ContainerEventResponse(nil), s.sent...)
}

func errCode(err error) codes.Code { return errdefs.Code(err) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.WaitFor(t, what, cond)
}

func fileHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	coretest.TmpfsForTests()
	os.Exit(m.Run())
}
