package libvirt

import (
	"context"
	"errors"
	"github.com/crimux/crimux/vmtypes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestValidateSnapshotName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ok    bool
		words string
	}{
		{"before-upgrade", true, ""},
		{"v1.2_3", true, ""},
		{strings.Repeat("a", vmtypes.MaxSnapshotNameLen), true, ""},
		{"", false, "must not be empty"},
		{strings.Repeat("a", 300), false, "300 bytes long"},
		{"../x", false, `"/"`},
		{"a/b", false, `"/"`},
		{"a..b", false, `".."`},
		{"..", false, `".."`},
		{"bad\x00name", false, "control characters"},
		{"tab\there", false, "control characters"},
		{"new\nline", false, "control characters"},
		{"\xff", false, "control characters"},
		{"snap shot", false, "not allowed"},
		{"é", false, "not allowed"},
		{"-flag", false, "start with a letter or a digit"},
		{".hidden", false, "start with a letter or a digit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := vmtypes.ValidateSnapshotName(tc.name)
			if tc.ok {
				if err != nil {
					t.Fatalf("vmtypes.ValidateSnapshotName(%q) = %v, want nil", tc.name, err)
				}
				return
			}
			if errdefs.Code(err) != codes.InvalidArgument {
				t.Fatalf("vmtypes.ValidateSnapshotName(%q) = %v, want InvalidArgument", tc.name, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "snapshot_name") || !strings.Contains(msg, tc.words) {
				t.Fatalf("error %q does not name snapshot_name and %q", msg, tc.words)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error message is %d bytes: long names must be shortened", len(err.Error()))
			}
		})
	}
}

func TestPlanPower(t *testing.T) {
	running := domainView{state: golibvirt.DomainRunning}
	paused := domainView{state: golibvirt.DomainPaused}
	shutoff := domainView{state: golibvirt.DomainShutoff}
	saved := domainView{state: golibvirt.DomainShutoff, managedSave: true}
	for _, tc := range []struct {
		name   string
		from   domainView
		target vmtypes.PowerState
		want   powerStep
		refuse bool
	}{
		{"running stays", running, vmtypes.PowerRunning, stepNone, false},
		{"pause", running, vmtypes.PowerPaused, stepSuspend, false},
		{"shut down", running, vmtypes.PowerShutdown, stepShutdown, false},
		{"hibernate", running, vmtypes.PowerHibernate, stepManagedSave, false},
		{"resume", paused, vmtypes.PowerRunning, stepResume, false},
		{"paused stays", paused, vmtypes.PowerPaused, stepNone, false},
		{"paused shut down resumes first", paused, vmtypes.PowerShutdown, stepResumeShutdown, false},
		{"hibernate paused", paused, vmtypes.PowerHibernate, stepManagedSave, false},
		{"boot", shutoff, vmtypes.PowerRunning, stepCreate, false},
		{"boot paused", shutoff, vmtypes.PowerPaused, stepCreatePaused, false},
		{"shut down stays", shutoff, vmtypes.PowerShutdown, stepNone, false},
		{"hibernate a shut-down VM", shutoff, vmtypes.PowerHibernate, 0, true},
		{"restore", saved, vmtypes.PowerRunning, stepCreate, false},
		{"restore paused", saved, vmtypes.PowerPaused, stepCreatePaused, false},
		{"hibernated stays", saved, vmtypes.PowerHibernate, stepNone, false},
		{"shut down a hibernated VM", saved, vmtypes.PowerShutdown, 0, true},
		{"crashed", domainView{state: golibvirt.DomainCrashed}, vmtypes.PowerRunning, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planPower(tc.from, tc.target)
			if tc.refuse {
				if errdefs.Code(err) != codes.FailedPrecondition {
					t.Fatalf("planPower = %v, %v; want FailedPrecondition", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("planPower = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPowerStateOf(t *testing.T) {
	for _, tc := range []struct {
		v    domainView
		want vmtypes.PowerState
	}{
		{domainView{state: golibvirt.DomainRunning}, vmtypes.PowerRunning},
		{domainView{state: golibvirt.DomainBlocked}, vmtypes.PowerRunning},
		{domainView{state: golibvirt.DomainPaused}, vmtypes.PowerPaused},
		{domainView{state: golibvirt.DomainShutoff}, vmtypes.PowerShutdown},
		{domainView{state: golibvirt.DomainShutoff, managedSave: true}, vmtypes.PowerHibernate},
	} {
		if got := powerStateOf(tc.v); got != tc.want {
			t.Errorf("powerStateOf(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestSnapshotXML(t *testing.T) {
	active, err := snapshotXML("s1", "before upgrade", true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<domainsnapshot>\n  <name>s1</name>\n  <description>before upgrade</description>\n  <memory snapshot=\"internal\"></memory>\n</domainsnapshot>"
	if active != want {
		t.Fatalf("active snapshot XML:\n got %s\nwant %s", active, want)
	}
	inactive, _ := snapshotXML("s2", "", false)
	if !strings.Contains(inactive, `<memory snapshot="no">`) {
		t.Fatalf("inactive snapshot XML asks for memory: %s", inactive)
	}
}

func TestParseSnapshotXML(t *testing.T) {
	doc := `<domainsnapshot>
  <name>s1</name>
  <description>d</description>
  <state>running</state>
  <creationTime>1796000000</creationTime>
  <memory snapshot='internal'/>
  <disks><disk name='vda' snapshot='internal'/></disks>
  <domain type='qemu'><name>crimux-x</name></domain>
</domainsnapshot>`
	got, err := parseSnapshotXML(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := vmtypes.SnapshotInfo{Name: "s1", Description: "d", CreatedAt: 1796000000, VMState: "running", Memory: true}
	if got != want {
		t.Fatalf("parseSnapshotXML = %+v, want %+v", got, want)
	}
	for state, p := range map[string]vmtypes.PowerState{"running": vmtypes.PowerRunning, "paused": vmtypes.PowerPaused, "shutoff": vmtypes.PowerShutdown} {
		if got := snapshotPowerState(state); got != p {
			t.Errorf("snapshotPowerState(%s) = %s, want %s", state, got, p)
		}
	}
}

// newTestRuntime is a runtime with a store and no libvirtd (every libvirt
// call is Unavailable).
func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	st, err := openStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &Runtime{store: st, conn: &conn{socket: "/nonexistent"}, console: newConsoles(log), events: newEventHub(), log: log, counters: &countingCounters{}}
}

func putVM(t *testing.T, r *Runtime, state runtimeapi.ContainerState, power vmtypes.PowerState) *containerRecord {
	t.Helper()
	sb := &sandboxRecord{ID: "sb1", ContainerID: "c1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns"}}}
	c := &containerRecord{ID: "c1", SandboxID: "sb1", Domain: "crimux-c1", State: state, PowerState: power,
		Reason: "Completed", Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}}
	if err := r.store.putSandbox(sb); err != nil {
		t.Fatal(err)
	}
	if err := r.store.putContainer(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPowerStateInContainerStatus: the container stays RUNNING whatever
// the power state; the reason and the verbose info show it.
func TestPowerStateInContainerStatus(t *testing.T) {
	for _, tc := range []struct {
		power      vmtypes.PowerState
		wantReason string
	}{
		{"", ""}, {vmtypes.PowerRunning, ""}, {vmtypes.PowerPaused, "Paused"}, {vmtypes.PowerShutdown, "Shutdown"}, {vmtypes.PowerHibernate, "Hibernated"},
	} {
		t.Run(string(tc.power), func(t *testing.T) {
			r := newTestRuntime(t)
			c := putVM(t, r, runtimeapi.ContainerState_CONTAINER_RUNNING, tc.power)
			c.Reason = ""
			_ = r.store.putContainer(c)
			resp, err := r.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1", Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			st := resp.GetStatus()
			if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Reason != tc.wantReason {
				t.Fatalf("status %s reason %q, want RUNNING reason %q", st.State, st.Reason, tc.wantReason)
			}
			if tc.wantReason != "" && !strings.Contains(st.Message, "VM API") {
				t.Fatalf("message %q does not say who chose the power state", st.Message)
			}
			wantPower := tc.power
			if wantPower == "" {
				wantPower = vmtypes.PowerRunning
			}
			if !strings.Contains(resp.Info["info"], `"powerState":"`+string(wantPower)+`"`) {
				t.Fatalf("verbose info %s lacks powerState %s", resp.Info["info"], wantPower)
			}
		})
	}
	t.Run("exited keeps its exit reason", func(t *testing.T) {
		r := newTestRuntime(t)
		putVM(t, r, runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerShutdown)
		resp, err := r.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1"})
		if err != nil || resp.Status.Reason != "Completed" {
			t.Fatalf("status %+v, %v; want reason Completed", resp.GetStatus(), err)
		}
	})
}

// TestStatsOfPoweredOffVM: zeros, no error, and no cgroup read.
func TestStatsOfPoweredOffVM(t *testing.T) {
	for _, p := range []vmtypes.PowerState{vmtypes.PowerShutdown, vmtypes.PowerHibernate} {
		r := newTestRuntime(t)
		r.cgroups = failingCgroups{}
		putVM(t, r, runtimeapi.ContainerState_CONTAINER_RUNNING, p)
		resp, err := r.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: "c1"})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if resp.Stats.Cpu.UsageCoreNanoSeconds.Value != 0 || resp.Stats.Memory.WorkingSetBytes.Value != 0 {
			t.Fatalf("%s: stats %+v, want zeros", p, resp.Stats)
		}
	}
}

type failingCgroups struct{}

func (failingCgroups) Create(VMCgroup) error { return errors.New("no") }
func (failingCgroups) Update(VMCgroup) error { return errors.New("no") }
func (failingCgroups) Remove(VMCgroup) error { return errors.New("no") }
func (failingCgroups) Stats(VMCgroup) (uint64, uint64, error) {
	return 0, 0, errors.New("cgroup read for a VM without qemu")
}

// TestUserStopIsNoExit: a stopped domain of a VM the user shut down or
// hibernated leaves its container running; any other stop (and a domain
// gone) ends it.
func TestUserStopIsNoExit(t *testing.T) {
	for _, tc := range []struct {
		power  vmtypes.PowerState
		reason string
		exits  bool
	}{
		{vmtypes.PowerShutdown, "Completed", false},
		{vmtypes.PowerHibernate, "Killed", false},
		{vmtypes.PowerRunning, "Completed", true},
		{vmtypes.PowerPaused, "Crashed", true},
		{vmtypes.PowerHibernate, "DomainGone", true},
	} {
		r := newTestRuntime(t)
		putVM(t, r, runtimeapi.ContainerState_CONTAINER_RUNNING, tc.power)
		r.domainStopped("crimux-c1", 0, tc.reason)
		c, err := r.store.container("c1")
		if err != nil {
			t.Fatal(err)
		}
		if exited := c.State == runtimeapi.ContainerState_CONTAINER_EXITED; exited != tc.exits {
			t.Errorf("power %s, stop %s: exited %v, want %v", tc.power, tc.reason, exited, tc.exits)
		}
	}
}

// TestVMOpsRefuse: the errors of a VM that is unknown, has no container,
// or whose container does not run; and bad arguments before any lookup.
func TestVMOpsRefuse(t *testing.T) {
	ctx := context.Background()
	r := newTestRuntime(t)
	putVM(t, r, runtimeapi.ContainerState_CONTAINER_EXITED, "")
	_ = r.store.putSandbox(&sandboxRecord{ID: "empty", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Config: &runtimeapi.PodSandboxConfig{}})
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		words string
	}{
		{"unknown VM", func() error { _, err := r.SetPowerState(ctx, "nope", vmtypes.PowerPaused, 0); return err }, codes.NotFound, `"nope"`},
		{"pod without VM", func() error { _, err := r.RebootVM(ctx, "empty", false, 0); return err }, codes.FailedPrecondition, "no VM"},
		{"exited VM by container ID", func() error { _, err := r.SetPowerState(ctx, "c1", vmtypes.PowerPaused, 0); return err }, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"exited VM by pod ID", func() error { _, err := r.RebootVM(ctx, "sb1", true, 0); return err }, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"exited VM snapshot", func() error { _, err := r.CreateSnapshot(ctx, "sb1", "s1", ""); return err }, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"bad power state", func() error { _, err := r.SetPowerState(ctx, "c1", "Sleeping", 0); return err }, codes.InvalidArgument, "Sleeping"},
		{"bad snapshot name", func() error { _, err := r.CreateSnapshot(ctx, "c1", "../x", ""); return err }, codes.InvalidArgument, "snapshot_name"},
		{"bad restore name", func() error { _, err := r.RestoreSnapshot(ctx, "c1", ""); return err }, codes.InvalidArgument, "snapshot_name"},
		{"bad delete name", func() error { return r.DeleteSnapshot(ctx, "c1", "a/b") }, codes.InvalidArgument, "snapshot_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if errdefs.Code(err) != tc.code || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("err %v (%s), want %s naming %s", err, errdefs.Code(err), tc.code, tc.words)
			}
		})
	}
}

// TestGetVMWithoutLibvirt: the store's view, the domain state unknown.
func TestGetVMWithoutLibvirt(t *testing.T) {
	r := newTestRuntime(t)
	putVM(t, r, runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
	for _, id := range []string{"sb1", "c1"} {
		info, err := r.GetVM(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.SandboxID != "sb1" || info.ContainerID != "c1" || info.PowerState != vmtypes.PowerPaused ||
			info.DomainState != "unknown" || info.Namespace != "ns" || info.Name != "web" {
			t.Fatalf("GetVM(%s) = %+v", id, info)
		}
	}
	vms, err := r.ListVMs(context.Background())
	if err != nil || len(vms) != 1 {
		t.Fatalf("ListVMs = %+v, %v", vms, err)
	}
}

// countingCounters counts what the runtime counts, for tests.
type countingCounters struct {
	mu      sync.Mutex
	removed map[string]int
}

func (c *countingCounters) GCRemoved(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed == nil {
		c.removed = map[string]int{}
	}
	c.removed[kind] += n
}

func (c *countingCounters) Reconnected(string) {}
