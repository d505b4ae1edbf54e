package vmops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

func TestPlanPower(t *testing.T) {
	t.Parallel()
	running := core.DomainView{State: virt.StateRunning}
	paused := core.DomainView{State: virt.StatePaused}
	shutoff := core.DomainView{State: virt.StateShutoff}
	saved := core.DomainView{State: virt.StateShutoff, ManagedSave: true}
	for _, tc := range []struct {
		name   string
		from   core.DomainView
		target vmtypes.PowerState
		want   powerStep
		refuse bool
	}{
		{"running stays", running, vmtypes.PowerRunning, stepNone, false},
		{"pause", running, vmtypes.PowerPaused, stepSuspend, false},
		{"shut down", running, vmtypes.PowerShutdown, stepShutdown, false},
		{"hibernate", running, vmtypes.PowerHibernate, stepManagedSave, false},
		{"blocked counts as running", core.DomainView{State: virt.StateBlocked}, vmtypes.PowerPaused, stepSuspend, false},
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
		{"crashed", core.DomainView{State: virt.StateCrashed}, vmtypes.PowerRunning, 0, true},
		{"shutting down", core.DomainView{State: virt.StateShutdown}, vmtypes.PowerShutdown, 0, true},
		{"pmsuspended", core.DomainView{State: virt.StatePMSuspended}, vmtypes.PowerRunning, 0, true},
		{"running, no such target", running, "Sleeping", 0, true},
		{"shut off, no such target", shutoff, "Sleeping", 0, true},
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

func TestSnapshotXML(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	for state, p := range map[string]vmtypes.PowerState{
		"running": vmtypes.PowerRunning, "blocked": vmtypes.PowerRunning,
		"paused": vmtypes.PowerPaused, "pmsuspended": vmtypes.PowerPaused,
		"shutoff": vmtypes.PowerShutdown, "crashed": vmtypes.PowerShutdown,
	} {
		if got := snapshotPowerState(state); got != p {
			t.Errorf("snapshotPowerState(%s) = %s, want %s", state, got, p)
		}
	}
	if _, err := parseSnapshotXML("<domainsnapshot"); err == nil || !strings.Contains(err.Error(), "parse snapshot XML") {
		t.Fatalf("parseSnapshotXML of broken XML: %v", err)
	}
	disk, err := parseSnapshotXML(`<domainsnapshot><name>d</name><state>shutoff</state><memory snapshot='no'/></domainsnapshot>`)
	if err != nil || disk.Memory || disk.CreatedAt != 0 || disk.VMState != "shutoff" {
		t.Fatalf("disk-only snapshot: %+v, %v", disk, err)
	}
}

// refuseEnv is pod sb1 with an exited VM c1 and pod "empty" without one.
func refuseEnv(t *testing.T) *env {
	e := newEnv(t)
	e.PutPod(t, "sb1", func(sb *store.Sandbox) { sb.Config.Metadata.Name = "web" })
	c := e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	c.Reason = "Completed"
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	e.PutPod(t, "empty", nil)
	return e
}

// TestVMOpsRefuse: the errors of a VM that is unknown, has no container,
// or whose container does not run; and bad arguments before any lookup.
func TestVMOpsRefuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := refuseEnv(t)
	r := e.ops
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
	t.Parallel()
	e := newEnv(t)
	e.PutPod(t, "sb1", func(sb *store.Sandbox) { sb.Config.Metadata.Name = "web" })
	e.PutVM(t, "sb1", "c1", running, vmtypes.PowerPaused)
	e.Libvirt.SetDown(fmt.Errorf("libvirtd at /nonexistent: not connected yet: %w", errdefs.ErrUnavailable))
	for _, id := range []string{"sb1", "c1"} {
		info, err := e.ops.GetVM(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.SandboxID != "sb1" || info.ContainerID != "c1" || info.PowerState != vmtypes.PowerPaused ||
			info.DomainState != "unknown" || info.Namespace != "ns" || info.Name != "web" {
			t.Fatalf("GetVM(%s) = %+v", id, info)
		}
	}
	vms, err := e.ops.ListVMs(context.Background())
	if err != nil || len(vms) != 1 {
		t.Fatalf("ListVMs = %+v, %v", vms, err)
	}
}
