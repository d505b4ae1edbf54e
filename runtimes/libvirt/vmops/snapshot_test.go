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

// snapEnv is a VM c1 in power state power, with its disk.
func snapEnv(t *testing.T, power vmtypes.PowerState) (*env, *store.Container) {
	t.Helper()
	e := newEnv(t)
	c := e.vm(t, running, power)
	withDisk(t, c)
	return e, c
}

// TestCreateSnapshot: a running or paused VM's memory is snapshotted with
// its disk, a shut-down VM's disk alone; the snapshot is the current one.
func TestCreateSnapshot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		power   vmtypes.PowerState
		state   string
		memory  bool
		xmlWant string
	}{
		{vmtypes.PowerRunning, "running", true, `<memory snapshot="internal">`},
		{vmtypes.PowerPaused, "paused", true, `<memory snapshot="internal">`},
		{vmtypes.PowerShutdown, "shutoff", false, `<memory snapshot="no">`},
	} {
		t.Run(string(tc.power), func(t *testing.T) {
			e, c := snapEnv(t, tc.power)
			before := e.domain(t, c).State
			info, err := e.ops.CreateSnapshot(context.Background(), "sb1", "s1", "before upgrade")
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != "s1" || info.Description != "before upgrade" || info.VMState != tc.state || info.Memory != tc.memory ||
				!info.Current || info.CreatedAt <= 0 {
				t.Fatalf("CreateSnapshot = %+v, want s1 of a %s VM, memory %v, current", info, tc.state, tc.memory)
			}
			d := e.domain(t, c)
			s, ok := d.Snapshots["s1"]
			if !ok || d.Current != "s1" || s.State != before || !strings.Contains(s.XML, tc.xmlWant) {
				t.Fatalf("libvirt's snapshot: %+v (current %q), want one of a %v domain with %s", s, d.Current, before, tc.xmlWant)
			}
			if d.State != before {
				t.Fatalf("a snapshot changed the domain from %v to %v", before, d.State)
			}
		})
	}
}

// TestSnapshotRefusals: names, duplicates, hibernated VMs, VMs without a
// disk, and libvirt's failures.
func TestSnapshotRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		power   vmtypes.PowerState
		created bool // the container is CREATED, not RUNNING
		noDsk   bool
		setup   func(*testing.T, *env, *store.Container)
		call    func(*Ops) error
		code    codes.Code
		words   string
	}{
		{name: "bad name", call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "a b", ""); return err },
			code: codes.InvalidArgument, words: "snapshot_name"},
		{name: "duplicate", setup: func(t *testing.T, e *env, _ *store.Container) {
			if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
				t.Fatal(err)
			}
		}, call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", "again"); return err },
			code: codes.AlreadyExists, words: `snapshot_name "s1": the VM already has a snapshot of that name`},
		{name: "hibernated, create", power: vmtypes.PowerHibernate,
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.FailedPrecondition, words: "hibernated"},
		{name: "hibernated, restore", power: vmtypes.PowerHibernate,
			call: func(o *Ops) error { _, err := o.RestoreSnapshot(ctx, "c1", "s1"); return err },
			code: codes.FailedPrecondition, words: "hibernated"},
		{name: "no disk, create", noDsk: true,
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.FailedPrecondition, words: "no disk to snapshot"},
		{name: "no disk, restore", noDsk: true,
			call: func(o *Ops) error { _, err := o.RestoreSnapshot(ctx, "c1", "s1"); return err },
			code: codes.FailedPrecondition, words: "no disk to snapshot"},
		{name: "created, create", created: true,
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.FailedPrecondition, words: "CONTAINER_CREATED"},
		{name: "unknown VM", call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "nope", "s1", ""); return err },
			code: codes.NotFound, words: `"nope"`},
		{name: "lookup fails", setup: func(_ *testing.T, e *env, _ *store.Container) { e.Libvirt.Fail("LookupSnapshot", boom) },
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.Unknown, words: "boom"},
		{name: "libvirt fails", setup: func(_ *testing.T, e *env, _ *store.Container) { e.Libvirt.Fail("CreateSnapshot", boom) },
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.Unknown, words: `snapshot "s1" of domain crimux-c1: libvirt: internal error: boom`},
		{name: "its XML unreadable", setup: func(_ *testing.T, e *env, _ *store.Container) { e.Libvirt.Fail("SnapshotXML", boom) },
			call: func(o *Ops) error { _, err := o.CreateSnapshot(ctx, "c1", "s1", ""); return err },
			code: codes.Unknown, words: `snapshot "s1": libvirt: internal error: boom`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			state := running
			if tc.created {
				state = runtimeapi.ContainerState_CONTAINER_CREATED
			}
			c := e.vm(t, state, tc.power)
			if !tc.noDsk {
				withDisk(t, c)
			}
			if tc.setup != nil {
				tc.setup(t, e, c)
			}
			before := len(e.domain(t, c).Snapshots)
			wantCode(t, tc.call(e.ops), tc.code, tc.words)
			if tc.name != "libvirt fails" && tc.name != "its XML unreadable" && len(e.domain(t, c).Snapshots) != before {
				t.Fatalf("a refused call changed the snapshots: %v", e.domain(t, c).Snapshots)
			}
			if e.Libvirt.Calls("RevertToSnapshot") != 0 {
				t.Fatal("a refused call reverted the VM")
			}
		})
	}
}

// TestListSnapshots: oldest first, ties by name; the current one marked.
func TestListSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, c := snapEnv(t, vmtypes.PowerRunning)
	for _, n := range []string{"b", "a", "c"} {
		if _, err := e.ops.CreateSnapshot(ctx, "c1", n, "snapshot "+n); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.ops.ListSnapshots(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(list); got != "b a c" {
		t.Fatalf("ListSnapshots = %s, want b a c (oldest first)", got)
	}
	for _, s := range list {
		if s.Current != (s.Name == "c") || s.Description != "snapshot "+s.Name || !s.Memory || s.VMState != "running" {
			t.Errorf("snapshot %+v", s)
		}
	}
	if !(list[0].CreatedAt < list[1].CreatedAt && list[1].CreatedAt < list[2].CreatedAt) {
		t.Fatalf("creation times %d %d %d not increasing", list[0].CreatedAt, list[1].CreatedAt, list[2].CreatedAt)
	}

	// Taken in the same second as a: by name.
	e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) {
		for _, n := range []string{"z", "y"} {
			d.Snapshots[n] = &virtfake.Snapshot{State: virt.StateRunning,
				XML: fmt.Sprintf("<domainsnapshot><name>%s</name><creationTime>%d</creationTime><state>running</state></domainsnapshot>", n, list[1].CreatedAt)}
		}
	})
	list, err = e.ops.ListSnapshots(ctx, "c1")
	if err != nil || names(list) != "b a y z c" {
		t.Fatalf("ListSnapshots = %s, %v; want b a y z c", names(list), err)
	}

	// Listing needs no running VM.
	rec := e.record(t, "c1")
	rec.State = runtimeapi.ContainerState_CONTAINER_EXITED
	if err := e.R.Store.PutContainer(rec); err != nil {
		t.Fatal(err)
	}
	if list, err := e.ops.ListSnapshots(ctx, "c1"); err != nil || len(list) != 5 {
		t.Fatalf("ListSnapshots of an exited VM = %s, %v", names(list), err)
	}
}

func TestListSnapshotsFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(*env, *store.Container)
		id    string
		code  codes.Code
		words string
	}{
		{"unknown VM", func(*env, *store.Container) {}, "nope", codes.NotFound, `"nope"`},
		{"libvirtd down", func(e *env, _ *store.Container) {
			e.Libvirt.SetDown(fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable))
		}, "c1", codes.Unavailable, "libvirtd down"},
		{"list fails", func(e *env, _ *store.Container) { e.Libvirt.Fail("ListSnapshots", boom) }, "c1", codes.Unknown, "boom"},
		{"XML fails", func(e *env, _ *store.Container) { e.Libvirt.Fail("SnapshotXML", boom) }, "c1", codes.Unknown, `snapshot "s1": libvirt`},
		{"XML broken", func(e *env, c *store.Container) {
			e.Libvirt.Edit(c.Domain, func(d *virtfake.Domain) { d.Snapshots["s1"].XML = "<domainsnapshot" })
		}, "c1", codes.Unknown, `snapshot "s1": parse snapshot XML`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c := snapEnv(t, vmtypes.PowerRunning)
			if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
				t.Fatal(err)
			}
			tc.setup(e, c)
			_, err := e.ops.ListSnapshots(ctx, tc.id)
			wantCode(t, err, tc.code, tc.words)
		})
	}
	t.Run("current unknown", func(t *testing.T) {
		e, _ := snapEnv(t, vmtypes.PowerRunning)
		if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
			t.Fatal(err)
		}
		e.Libvirt.Fail("IsCurrentSnapshot", boom)
		list, err := e.ops.ListSnapshots(ctx, "c1")
		if err != nil || len(list) != 1 || list[0].Current {
			t.Fatalf("ListSnapshots = %+v, %v; want s1, not marked current", list, err)
		}
	})
}

// TestRestoreSnapshot: the VM ends in the state its snapshot was taken
// in, whatever it is in now, and the record says so.
func TestRestoreSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		takenIn, now vmtypes.PowerState
	}{
		{vmtypes.PowerRunning, vmtypes.PowerRunning},
		{vmtypes.PowerRunning, vmtypes.PowerShutdown},
		{vmtypes.PowerRunning, vmtypes.PowerPaused},
		{vmtypes.PowerPaused, vmtypes.PowerRunning},
		{vmtypes.PowerPaused, vmtypes.PowerShutdown},
		{vmtypes.PowerShutdown, vmtypes.PowerRunning},
		{vmtypes.PowerShutdown, vmtypes.PowerPaused},
		{vmtypes.PowerShutdown, vmtypes.PowerShutdown},
	} {
		t.Run(fmt.Sprintf("taken %s, now %s", tc.takenIn, tc.now), func(t *testing.T) {
			e, c := snapEnv(t, tc.takenIn)
			if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ops.CreateSnapshot(ctx, "c1", "later", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ops.SetPowerState(ctx, "c1", tc.now, 0); err != nil {
				t.Fatal(err)
			}
			got, err := e.ops.RestoreSnapshot(ctx, "sb1", "s1")
			if err != nil {
				t.Fatal(err)
			}
			d := e.domain(t, c)
			if got != tc.takenIn || powerOf(d) != tc.takenIn || d.Current != "s1" {
				t.Fatalf("RestoreSnapshot = %s; domain %s, current %q; want %s, s1", got, powerOf(d), d.Current, tc.takenIn)
			}
			if rec := e.record(t, "c1"); rec.PowerState != tc.takenIn || rec.State != running {
				t.Fatalf("record %s/%s, want RUNNING/%s", rec.State, rec.PowerState, tc.takenIn)
			}
		})
	}
}

func TestRestoreSnapshotFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("unknown snapshot", func(t *testing.T) {
		e, _ := snapEnv(t, vmtypes.PowerRunning)
		_, err := e.ops.RestoreSnapshot(ctx, "c1", "nope")
		wantCode(t, err, codes.NotFound, `snapshot_name "nope": the VM has no snapshot of that name`)
	})
	t.Run("lookup fails", func(t *testing.T) {
		e, _ := snapEnv(t, vmtypes.PowerRunning)
		e.Libvirt.Fail("LookupSnapshot", boom)
		_, err := e.ops.RestoreSnapshot(ctx, "c1", "s1")
		wantCode(t, err, codes.Unknown, "boom")
	})
	t.Run("snapshot XML fails", func(t *testing.T) {
		e, _ := snapEnv(t, vmtypes.PowerRunning)
		if _, err := e.ops.CreateSnapshot(ctx, "c1", "s1", ""); err != nil {
			t.Fatal(err)
		}
		e.Libvirt.Fail("SnapshotXML", boom)
		_, err := e.ops.RestoreSnapshot(ctx, "c1", "s1")
		wantCode(t, err, codes.Unknown, `snapshot "s1"`)
		if e.Libvirt.Calls("RevertToSnapshot") != 0 {
			t.Fatal("reverted to a snapshot it could not read")
		}
	})
	// The revert fails: the power state recorded before it (Shutdown,
	// the snapshot's) is settled back to what libvirt reports.
	t.Run("revert fails", func(t *testing.T) {
		e, c := snapEnv(t, vmtypes.PowerShutdown)
		if _, err := e.ops.CreateSnapshot(ctx, "c1", "off", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ops.SetPowerState(ctx, "c1", vmtypes.PowerRunning, 0); err != nil {
			t.Fatal(err)
		}
		e.Libvirt.Fail("RevertToSnapshot", boom)
		got, err := e.ops.RestoreSnapshot(ctx, "c1", "off")
		wantCode(t, err, codes.Unknown, `restore snapshot "off" of domain crimux-c1`)
		if got != vmtypes.PowerRunning || e.record(t, "c1").PowerState != vmtypes.PowerRunning || e.domain(t, c).State != virt.StateRunning {
			t.Fatalf("after a failed revert: returned %s, recorded %s, domain %v; want Running", got,
				e.record(t, "c1").PowerState, e.domain(t, c).State)
		}
	})
}

func TestDeleteSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, c := snapEnv(t, vmtypes.PowerRunning)
	for _, n := range []string{"s1", "s2"} {
		if _, err := e.ops.CreateSnapshot(ctx, "c1", n, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ops.DeleteSnapshot(ctx, "sb1", "s2"); err != nil {
		t.Fatal(err)
	}
	d := e.domain(t, c)
	if _, ok := d.Snapshots["s2"]; ok || len(d.Snapshots) != 1 || d.Current != "" {
		t.Fatalf("after deleting s2: snapshots %v, current %q", d.Snapshots, d.Current)
	}
	if list, err := e.ops.ListSnapshots(ctx, "c1"); err != nil || names(list) != "s1" {
		t.Fatalf("ListSnapshots = %s, %v; want s1", names(list), err)
	}
	wantCode(t, e.ops.DeleteSnapshot(ctx, "c1", "s2"), codes.NotFound, `snapshot_name "s2"`)
	wantCode(t, e.ops.DeleteSnapshot(ctx, "c1", ".."), codes.InvalidArgument, "snapshot_name")
	wantCode(t, e.ops.DeleteSnapshot(ctx, "nope", "s1"), codes.NotFound, `"nope"`)
	e.Libvirt.Fail("DeleteSnapshot", boom)
	wantCode(t, e.ops.DeleteSnapshot(ctx, "c1", "s1"), codes.Unknown, `delete snapshot "s1" of domain crimux-c1`)
	e.Libvirt.SetDown(fmt.Errorf("libvirtd down: %w", errdefs.ErrUnavailable))
	wantCode(t, e.ops.DeleteSnapshot(ctx, "c1", "s1"), codes.Unavailable, "libvirtd down")
	if _, ok := e.domain(t, c).Snapshots["s1"]; !ok {
		t.Fatal("a failed delete removed s1")
	}
}

func names(list []vmtypes.SnapshotInfo) string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return strings.Join(out, " ")
}
