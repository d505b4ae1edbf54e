package vmops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// vmsEnv records VM pods of every kind, named <namespace>/<name>:
//
//	a/alpha  pod without a VM
//	a/zeta   VM zeta1 paused (older), then VM zeta2 hibernated
//	b/web    VM web running, with two snapshots
//	c/gone   VM whose domain libvirt lost
//	c/hidden pod naming a VM being removed
func vmsEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	pod := func(id, ns, name string) {
		e.PutPod(t, id, func(sb *store.Sandbox) { sb.Config.Metadata.Namespace, sb.Config.Metadata.Name = ns, name })
	}
	vm := func(sb, id string, power vmtypes.PowerState, created int64) *store.Container {
		c := e.PutVM(t, sb, id, running, power)
		c.CreatedAt, c.StartedAt = created, created+1
		if err := e.R.Store.PutContainer(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	pod("pweb", "b", "web")
	web := vm("pweb", "web", vmtypes.PowerRunning, 300)
	withDisk(t, web)
	for _, n := range []string{"s1", "s2"} {
		if _, err := e.ops.CreateSnapshot(context.Background(), "web", n, ""); err != nil {
			t.Fatal(err)
		}
	}
	pod("pzeta2", "a", "zeta")
	vm("pzeta2", "zeta2", vmtypes.PowerHibernate, 200)
	pod("pzeta1", "a", "zeta")
	vm("pzeta1", "zeta1", vmtypes.PowerPaused, 100)
	pod("palpha", "a", "alpha")
	pod("pgone", "c", "gone")
	gone := vm("pgone", "gone", vmtypes.PowerRunning, 400)
	e.Libvirt.Edit(gone.Domain, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
	if err := e.Libvirt.Undefine(virt.Domain{Name: gone.Domain}); err != nil {
		t.Fatal(err)
	}
	pod("phidden", "c", "hidden")
	hidden := vm("phidden", "hidden", vmtypes.PowerRunning, 500)
	hidden.Removing = true
	if err := e.R.Store.PutContainer(hidden); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestListVMs(t *testing.T) {
	t.Parallel()
	e := vmsEnv(t)
	vms, err := e.ops.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vms {
		got = append(got, fmt.Sprintf("%s/%s:%s:%s:%s:%d", v.Namespace, v.Name, v.ContainerID, v.PowerState, v.DomainState, len(v.Snapshots)))
	}
	want := []string{
		"a/alpha:::unknown:0",
		"a/zeta:zeta1:Paused:paused:0",
		"a/zeta:zeta2:Hibernate:shutoff:0",
		"b/web:web:Running:running:2",
		"c/gone:gone:Running:undefined:0",
		"c/hidden:::unknown:0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ListVMs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !vms[2].ManagedSave || vms[1].ManagedSave {
		t.Errorf("managed save: zeta2 %v, zeta1 %v; want true, false", vms[2].ManagedSave, vms[1].ManagedSave)
	}
}

// TestGetVM: by pod or container ID, what the store and libvirt say.
func TestGetVM(t *testing.T) {
	t.Parallel()
	e := vmsEnv(t)
	for _, id := range []string{"pweb", "web"} {
		v, err := e.ops.GetVM(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if v.SandboxID != "pweb" || v.ContainerID != "web" || v.Namespace != "b" || v.Name != "web" ||
			v.PodState != runtimeapi.PodSandboxState_SANDBOX_READY || v.ContainerState != running ||
			v.PowerState != vmtypes.PowerRunning || v.Domain != "crimux-web" || v.DomainState != "running" || v.ManagedSave ||
			v.Accel != "tcg" || v.VCPUs != 1 || v.MemoryMiB != 128 || v.Image != "vm-image" || v.CreatedAt != 300 || v.StartedAt != 301 {
			t.Fatalf("GetVM(%s) = %+v", id, v)
		}
		if names(v.Snapshots) != "s1 s2" || !v.Snapshots[1].Current {
			t.Fatalf("GetVM(%s) snapshots = %+v", id, v.Snapshots)
		}
	}
	for _, tc := range []struct {
		id                 string
		domainState, power string
	}{
		{"zeta1", "paused", "Paused"},
		{"pzeta2", "shutoff", "Hibernate"},
		{"gone", "undefined", "Running"},
		{"palpha", "unknown", ""},
	} {
		v, err := e.ops.GetVM(context.Background(), tc.id)
		if err != nil || v.DomainState != tc.domainState || string(v.PowerState) != tc.power {
			t.Errorf("GetVM(%s) = %+v, %v; want domain %s, power %q", tc.id, v, err, tc.domainState, tc.power)
		}
	}
	_, err := e.ops.GetVM(context.Background(), "nope")
	wantCode(t, err, codes.NotFound, `no VM pod or VM container has ID "nope"`)
	// A container being removed is no VM of its pod any more.
	_, err = e.ops.GetVM(context.Background(), "hidden")
	wantCode(t, err, codes.NotFound, `"hidden"`)
}

// TestGetVMWhenLibvirtFails: what libvirt cannot say stays unknown; the
// store's part is reported all the same.
func TestGetVMWhenLibvirtFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		fail        func(*env)
		domainState string
		snapshots   int
	}{
		{"libvirtd down", func(e *env) { e.Libvirt.SetDown(fmt.Errorf("down: %w", errdefs.ErrUnavailable)) }, "unknown", 0},
		{"lookup fails", func(e *env) { e.Libvirt.Fail("Lookup", boom) }, "unknown", 0},
		{"state fails", func(e *env) { e.Libvirt.Fail("State", boom) }, "unknown", 2},
		{"snapshots fail", func(e *env) { e.Libvirt.Fail("ListSnapshots", boom) }, "running", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := vmsEnv(t)
			tc.fail(e)
			v, err := e.ops.GetVM(context.Background(), "web")
			if err != nil {
				t.Fatal(err)
			}
			if v.ContainerID != "web" || v.PowerState != vmtypes.PowerRunning || v.DomainState != tc.domainState || len(v.Snapshots) != tc.snapshots {
				t.Fatalf("GetVM = %+v; want domain state %s, %d snapshots", v, tc.domainState, tc.snapshots)
			}
		})
	}
}
