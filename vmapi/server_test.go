package vmapi_test

import (
	"context"
	"fmt"
	"io"
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
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmapi"
	"github.com/crimux/crimux/vmtypes"
)

// fakeVMs is a VM runtime in memory. It records the IDs it is called with
// (the runtime's own, without the "vm--" prefix).
type fakeVMs struct {
	mu    sync.Mutex
	vms   []vmtypes.VMInfo
	calls []string
	// reboot is what RebootVM answers.
	reboot vmtypes.RebootResult
	// foreign is what ListForeign answers; Adopt/DeleteForeign act on it.
	foreign []vmtypes.ForeignResource
}

func (f *fakeVMs) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeVMs) lastCall() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return ""
	}
	return f.calls[len(f.calls)-1]
}

func (f *fakeVMs) find(id string) (vmtypes.VMInfo, error) {
	for _, v := range f.vms {
		if v.SandboxID == id || v.ContainerID == id {
			return v, nil
		}
	}
	return vmtypes.VMInfo{}, fmt.Errorf("no VM pod or VM container has ID %q: %w", id, errdefs.ErrNotFound)
}

func (f *fakeVMs) ListVMs(context.Context) ([]vmtypes.VMInfo, error) { return f.vms, nil }
func (f *fakeVMs) GetVM(_ context.Context, id string) (vmtypes.VMInfo, error) {
	f.record("GetVM %s", id)
	return f.find(id)
}
func (f *fakeVMs) RebootVM(_ context.Context, id string, hard bool, timeout time.Duration) (vmtypes.RebootResult, error) {
	f.record("RebootVM %s hard=%v timeout=%s", id, hard, timeout)
	_, err := f.find(id)
	return f.reboot, err
}
func (f *fakeVMs) SetPowerState(_ context.Context, id string, p vmtypes.PowerState, grace time.Duration) (vmtypes.PowerChange, error) {
	f.record("SetPowerState %s %s grace=%s", id, p, grace)
	_, err := f.find(id)
	return vmtypes.PowerChange{Previous: vmtypes.PowerRunning, State: p, Forced: true}, err
}
func (f *fakeVMs) CreateSnapshot(_ context.Context, id, name, desc string) (vmtypes.SnapshotInfo, error) {
	f.record("CreateSnapshot %s %s", id, name)
	_, err := f.find(id)
	return vmtypes.SnapshotInfo{Name: name, Description: desc, VMState: "running", Memory: true}, err
}
func (f *fakeVMs) ListSnapshots(_ context.Context, id string) ([]vmtypes.SnapshotInfo, error) {
	f.record("ListSnapshots %s", id)
	v, err := f.find(id)
	return v.Snapshots, err
}
func (f *fakeVMs) RestoreSnapshot(_ context.Context, id, name string) (vmtypes.PowerState, error) {
	f.record("RestoreSnapshot %s %s", id, name)
	if _, err := f.find(id); err != nil {
		return "", err
	}
	return "", fmt.Errorf("snapshot_name %q: no snapshot of that name: %w", name, errdefs.ErrNotFound)
}
func (f *fakeVMs) DeleteSnapshot(_ context.Context, id, name string) error {
	f.record("DeleteSnapshot %s %s", id, name)
	_, err := f.find(id)
	return err
}

func (f *fakeVMs) ListForeign(context.Context) ([]vmtypes.ForeignResource, error) {
	return f.foreign, nil
}
func (f *fakeVMs) AdoptForeign(_ context.Context, kind, name string) error {
	f.record("AdoptForeign %s %s", kind, name)
	return f.findForeign(kind, name)
}
func (f *fakeVMs) DeleteForeign(_ context.Context, kind, name string) error {
	f.record("DeleteForeign %s %s", kind, name)
	return f.findForeign(kind, name)
}
func (f *fakeVMs) findForeign(kind, name string) error {
	for _, r := range f.foreign {
		if r.Kind == kind && r.Name == name {
			return nil
		}
	}
	return fmt.Errorf("%s %q: no resource of another identity has this name: %w", kind, name, errdefs.ErrNotFound)
}

// vmBackend is the registry backend of the fake VM runtime: it declares
// the VM operations ability (vmtypes.Operator) as the real one does.
type vmBackend struct{ *fakeVMs }

func (vmBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (vmBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (vmBackend) Close() error                             { return nil }

type factory struct{ backend registry.Backend }

func (f factory) Key(config.Runtime) string { return "one" }
func (f factory) New(context.Context, config.Runtime, *idcodec.Codec) (registry.Backend, error) {
	return f.backend, nil
}

// ctrBackend is containerd as a crifake on a socket.
type ctrBackend struct {
	rs runtimeapi.RuntimeServiceClient
}

func (b ctrBackend) Runtime() runtimeapi.RuntimeServiceClient { return b.rs }
func (ctrBackend) Images() runtimeapi.ImageServiceClient      { return nil }
func (ctrBackend) Close() error                               { return nil }

// newClient serves the VM API with the CRI server's interceptors over a
// unix socket, in front of a fake containerd (pod "ctr-pod" default/web,
// container "ctr-1") and a fake VM runtime.
func newClient(t *testing.T, vms *fakeVMs) vmv1.VMServiceClient {
	t.Helper()
	ctrd := crifake.New("ctrd")
	ctrd.AddSandboxes(&runtimeapi.PodSandbox{Id: "ctr-pod", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}})
	ctrd.AddContainers(&runtimeapi.Container{Id: "ctr-1", PodSandboxId: "ctr-pod", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}})
	srv := crifake.Serve(t, ctrd, crifake.SocketPath(t, "ctrd.sock"))
	ctrConn := dial(t, srv.Endpoint())

	cfg := config.Default()
	cfg.Runtimes = []config.Runtime{
		{Name: "containerd", Type: config.TypeContainer, Handlers: []string{"runc"}, Primary: true},
		{Name: "vm", Type: config.TypeVM, Handlers: []string{"vm"}},
	}
	reg, err := registry.New(context.Background(), cfg, map[string]registry.Factory{
		config.TypeContainer: factory{ctrBackend{runtimeapi.NewRuntimeServiceClient(ctrConn)}},
		config.TypeVM:        factory{vmBackend{vms}},
	})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(cri.UnaryInterceptor(log, nil)))
	vmapi.New(func() *registry.Registry { return reg }, log).Register(g)
	sock := crifake.SocketPath(t, "crimux.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return vmv1.NewVMServiceClient(dial(t, "unix://"+sock))
}

func dial(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newVMs() *fakeVMs {
	return &fakeVMs{vms: []vmtypes.VMInfo{{
		SandboxID: "sb1", ContainerID: "c1", Namespace: "default", Name: "db",
		PodState: runtimeapi.PodSandboxState_SANDBOX_READY, ContainerState: runtimeapi.ContainerState_CONTAINER_RUNNING,
		PowerState: vmtypes.PowerPaused, Domain: "crimux-c1", DomainState: "paused", Accel: "tcg", VCPUs: 2, MemoryMiB: 256,
		Snapshots: []vmtypes.SnapshotInfo{{Name: "s1", VMState: "running", Memory: true, CreatedAt: 42}},
	}}}
}

func byID(id string) *vmv1.VMRef { return &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: id}} }
func byPod(ns, name string) *vmv1.VMRef {
	return &vmv1.VMRef{Ref: &vmv1.VMRef_Pod{Pod: &vmv1.PodName{Namespace: ns, Name: name}}}
}

// TestAddressing: a VM by pod ID, container ID (as CRI clients see them)
// or namespace/name reaches the runtime by its own pod or container ID,
// and comes back with the IDs clients see.
func TestAddressing(t *testing.T) {
	vms := newVMs()
	c := newClient(t, vms)
	for _, tc := range []struct {
		ref      *vmv1.VMRef
		wantCall string
	}{
		{byID("vm--sb1"), "GetVM sb1"},
		{byID("vm--c1"), "GetVM c1"},
		{byPod("default", "db"), "GetVM sb1"},
	} {
		resp, err := c.GetVM(context.Background(), &vmv1.GetVMRequest{Vm: tc.ref})
		if err != nil {
			t.Fatalf("GetVM(%v): %v", tc.ref, err)
		}
		if got := vms.lastCall(); got != tc.wantCall {
			t.Fatalf("GetVM(%v) called %q, want %q", tc.ref, got, tc.wantCall)
		}
		v := resp.GetVm()
		if v.PodSandboxId != "vm--sb1" || v.ContainerId != "vm--c1" || v.PowerState != vmv1.PowerState_POWER_STATE_PAUSED ||
			v.ContainerState != "CONTAINER_RUNNING" || v.Resources.GetVcpus() != 2 || v.Resources.GetMemoryMib() != 256 ||
			v.Accelerator != "tcg" || len(v.Snapshots) != 1 || !v.Snapshots[0].HasMemory {
			t.Fatalf("GetVM(%v) = %v", tc.ref, v)
		}
	}
	list, err := c.ListVMs(context.Background(), &vmv1.ListVMsRequest{})
	if err != nil || len(list.Vms) != 1 || list.Vms[0].ContainerId != "vm--c1" {
		t.Fatalf("ListVMs = %v, %v", list, err)
	}
}

// TestOperations: requests reach the runtime with their arguments, and the
// answers come back converted.
func TestOperations(t *testing.T) {
	ctx := context.Background()
	vms := newVMs()
	c := newClient(t, vms)

	vms.reboot = vmtypes.RebootResult{Hard: true, SoftTimedOut: true}
	rb, err := c.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: byID("vm--c1"), TimeoutSeconds: 5})
	if err != nil || rb.Method != vmv1.RebootMethod_REBOOT_METHOD_HARD || !rb.SoftTimedOut {
		t.Fatalf("RebootVM = %v, %v", rb, err)
	}
	if got := vms.lastCall(); got != "RebootVM c1 hard=false timeout=5s" {
		t.Fatalf("RebootVM called %q", got)
	}
	vms.reboot = vmtypes.RebootResult{}
	if rb, _ := c.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: byID("vm--c1")}); rb.GetMethod() != vmv1.RebootMethod_REBOOT_METHOD_SOFT {
		t.Fatalf("soft reboot answered %v", rb)
	}

	ps, err := c.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: byID("vm--sb1"), State: vmv1.PowerState_POWER_STATE_SHUTDOWN, TimeoutSeconds: 7})
	if err != nil || ps.Previous != vmv1.PowerState_POWER_STATE_RUNNING || ps.State != vmv1.PowerState_POWER_STATE_SHUTDOWN || !ps.Forced {
		t.Fatalf("SetPowerState = %v, %v", ps, err)
	}
	if got := vms.lastCall(); got != "SetPowerState sb1 Shutdown grace=7s" {
		t.Fatalf("SetPowerState called %q", got)
	}

	cs, err := c.CreateSnapshot(ctx, &vmv1.CreateSnapshotRequest{Vm: byPod("default", "db"), SnapshotName: "before-upgrade", Description: "d"})
	if err != nil || cs.Snapshot.GetName() != "before-upgrade" || cs.Snapshot.GetVmState() != "running" {
		t.Fatalf("CreateSnapshot = %v, %v", cs, err)
	}
	ls, err := c.ListSnapshots(ctx, &vmv1.ListSnapshotsRequest{Vm: byID("vm--c1")})
	if err != nil || len(ls.Snapshots) != 1 || ls.Snapshots[0].Name != "s1" || ls.Snapshots[0].CreatedAt != 42 {
		t.Fatalf("ListSnapshots = %v, %v", ls, err)
	}
	if _, err := c.DeleteSnapshot(ctx, &vmv1.DeleteSnapshotRequest{Vm: byID("vm--c1"), SnapshotName: "s1"}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if got := vms.lastCall(); got != "DeleteSnapshot c1 s1" {
		t.Fatalf("DeleteSnapshot called %q", got)
	}
}

// TestBadInput: each error with its gRPC code and a message naming what
// is wrong; nothing invalid reaches the runtime.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	vms := newVMs()
	vms.vms = append(vms.vms,
		vmtypes.VMInfo{SandboxID: "twin1", Namespace: "default", Name: "twin", PodState: runtimeapi.PodSandboxState_SANDBOX_READY},
		vmtypes.VMInfo{SandboxID: "twin2", Namespace: "default", Name: "twin", PodState: runtimeapi.PodSandboxState_SANDBOX_READY},
		vmtypes.VMInfo{SandboxID: "old", Namespace: "default", Name: "again", PodState: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: 1},
		vmtypes.VMInfo{SandboxID: "new", Namespace: "default", Name: "again", PodState: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 2},
	)
	c := newClient(t, vms)
	get := func(ref *vmv1.VMRef) error { _, err := c.GetVM(ctx, &vmv1.GetVMRequest{Vm: ref}); return err }
	snap := func(name string) error {
		_, err := c.CreateSnapshot(ctx, &vmv1.CreateSnapshotRequest{Vm: byID("vm--c1"), SnapshotName: name})
		return err
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		words []string
	}{
		{"no VM named", func() error { return get(nil) }, codes.InvalidArgument, []string{"vm", "must name a VM"}},
		{"malformed ID", func() error { return get(byID("../x")) }, codes.InvalidArgument, []string{"vm.id", "../x"}},
		{"unknown VM ID", func() error { return get(byID("vm--nope")) }, codes.NotFound, []string{`"vm--nope"`}},
		{"unknown unprefixed ID", func() error { return get(byID("nope")) }, codes.NotFound, []string{`"nope"`, "no VM pod or container"}},
		{"container pod ID", func() error { return get(byID("ctr-pod")) }, codes.FailedPrecondition, []string{`"ctr-pod"`, "not a VM"}},
		{"container ID", func() error { return get(byID("ctr-1")) }, codes.FailedPrecondition, []string{`"ctr-1"`, "not a VM"}},
		{"container pod by name", func() error {
			_, err := c.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: byPod("default", "web"), State: vmv1.PowerState_POWER_STATE_PAUSED})
			return err
		}, codes.FailedPrecondition, []string{`"default/web"`, "not a VM"}},
		{"unknown pod name", func() error { return get(byPod("default", "ghost")) }, codes.NotFound, []string{`"default/ghost"`}},
		{"pod name without namespace", func() error { return get(byPod("", "db")) }, codes.InvalidArgument, []string{"vm.pod.namespace"}},
		{"two ready pods of one name", func() error { return get(byPod("default", "twin")) }, codes.FailedPrecondition, []string{"vm--twin1", "vm--twin2", "by ID"}},
		{"empty snapshot name", func() error { return snap("") }, codes.InvalidArgument, []string{"snapshot_name", "empty"}},
		{"path snapshot name", func() error { return snap("../x") }, codes.InvalidArgument, []string{"snapshot_name", `"/"`}},
		{"long snapshot name", func() error { return snap(strings.Repeat("x", 300)) }, codes.InvalidArgument, []string{"snapshot_name", "300 bytes"}},
		{"unknown snapshot", func() error {
			_, err := c.RestoreSnapshot(ctx, &vmv1.RestoreSnapshotRequest{Vm: byID("vm--c1"), SnapshotName: "ghost"})
			return err
		}, codes.NotFound, []string{`"vm--c1"`, `"ghost"`}},
		{"no power state", func() error {
			_, err := c.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: byID("vm--c1")})
			return err
		}, codes.InvalidArgument, []string{"state", "POWER_STATE_UNSPECIFIED"}},
		{"timeout too long", func() error {
			_, err := c.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: byID("vm--c1"), TimeoutSeconds: 100000})
			return err
		}, codes.InvalidArgument, []string{"timeout_seconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vms.calls = nil
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("err %v, want code %s", err, tc.code)
			}
			for _, w := range tc.words {
				if !strings.Contains(st.Message(), w) {
					t.Fatalf("message %q does not name %q", st.Message(), w)
				}
			}
			if tc.code == codes.InvalidArgument && vms.lastCall() != "" {
				t.Fatalf("invalid request reached the runtime: %s", vms.lastCall())
			}
		})
	}
	t.Run("a ready pod wins over an old attempt", func(t *testing.T) {
		if err := get(byPod("default", "again")); err != nil {
			t.Fatal(err)
		}
		if got := vms.lastCall(); got != "GetVM new" {
			t.Fatalf("called %q, want GetVM new", got)
		}
	})
}
