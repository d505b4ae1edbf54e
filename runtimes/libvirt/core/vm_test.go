package core_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// TestBeginVMOp: the prologue of every VM operation, by pod or container
// ID: the VM locked and observed, or the error that says why not.
func TestBeginVMOp(t *testing.T) {
	e := coretest.New(t)
	putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused)
	putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_EXITED, "")
	putVM(t, e, "sb3", "c3", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerHibernate)
	e.PutPod(t, "empty", nil)
	e.PutVM(t, "sbx", "nodomain", runtimeapi.ContainerState_CONTAINER_RUNNING, "") // no pod record: "sbx"
	for _, id := range []string{"sb1", "c1"} {
		op, err := e.R.BeginVMOp(id)
		if err != nil {
			t.Fatalf("BeginVMOp(%s): %v", id, err)
		}
		if op.C.ID != "c1" || op.Dom.Name != "crimux-c1" || op.View.State != virt.StatePaused || core.PowerStateOf(op.View) != vmtypes.PowerPaused {
			t.Fatalf("BeginVMOp(%s) = %+v", id, op)
		}
		if n := e.R.LockWaiters("sb1"); n != 1 {
			t.Fatalf("pod lock held %d times during the op, want 1", n)
		}
		op.Done()
		if n := e.R.LockWaiters("sb1"); n != 0 {
			t.Fatalf("pod lock held after Done")
		}
	}
	op, err := e.R.BeginVMOp("c3")
	if err != nil || !op.View.ManagedSave || core.PowerStateOf(op.View) != vmtypes.PowerHibernate {
		t.Fatalf("BeginVMOp of a hibernated VM: %+v, %v", op, err)
	}
	op.Done()
	for _, tc := range []struct {
		id    string
		setup func()
		code  codes.Code
		words string
	}{
		{"nope", nil, codes.NotFound, `"nope"`},
		{"empty", nil, codes.FailedPrecondition, "no VM"},
		{"c2", nil, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"sb2", nil, codes.FailedPrecondition, "CONTAINER_EXITED"},
		{"nodomain", nil, codes.NotFound, "pod sandbox"},
		{"c1", func() { e.Libvirt.SetDown(errUnavailable) }, codes.Unavailable, "refused"},
		{"c1", func() { e.Libvirt.SetDown(nil); e.Libvirt.Fail("Lookup", errdefs.ErrNotFound) }, codes.NotFound, "crimux-c1"},
		{"c1", func() { e.Libvirt.Fail("State", errUnavailable) }, codes.Unavailable, "refused"},
		{"c3", func() { e.Libvirt.Fail("HasManagedSave", errUnavailable) }, codes.Unavailable, "refused"},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		op, err := e.R.BeginVMOp(tc.id)
		if errdefs.Code(err) != tc.code || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("BeginVMOp(%s) = %+v, %v (%s); want %s saying %s", tc.id, op, err, errdefs.Code(err), tc.code, tc.words)
		}
	}
	for _, sb := range []string{"sb1", "sb2", "sb3", "empty"} {
		if n := e.R.LockWaiters(sb); n != 0 {
			t.Fatalf("lock of %s kept after a refusal", sb)
		}
	}
}

func TestPowerStateOf(t *testing.T) {
	for _, tc := range []struct {
		v    core.DomainView
		want vmtypes.PowerState
	}{
		{core.DomainView{State: virt.StateRunning}, vmtypes.PowerRunning},
		{core.DomainView{State: virt.StateBlocked}, vmtypes.PowerRunning},
		{core.DomainView{State: virt.StatePaused}, vmtypes.PowerPaused},
		{core.DomainView{State: virt.StatePMSuspended}, vmtypes.PowerPaused},
		{core.DomainView{State: virt.StateShutoff}, vmtypes.PowerShutdown},
		{core.DomainView{State: virt.StateCrashed}, vmtypes.PowerShutdown},
		{core.DomainView{State: virt.StateShutoff, ManagedSave: true}, vmtypes.PowerHibernate},
	} {
		if got := core.PowerStateOf(tc.v); got != tc.want {
			t.Errorf("PowerStateOf(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestObserve(t *testing.T) {
	f := virtfake.New()
	f.Put("d", virtfake.Domain{State: virt.StateShutoff, ManagedSave: true})
	if v, err := core.Observe(f, virt.Domain{Name: "d"}); err != nil || v != (core.DomainView{State: virt.StateShutoff, ManagedSave: true}) {
		t.Fatalf("Observe = %+v, %v", v, err)
	}
	if _, err := core.Observe(f, virt.Domain{Name: "nope"}); !errdefs.IsNotFound(err) {
		t.Fatalf("Observe of a missing domain: %v, want NotFound", err)
	}
}

// TestStatusOf: the record as CRI sees it; a power state the user chose
// shows as the reason of a RUNNING container.
func TestStatusOf(t *testing.T) {
	e := coretest.New(t)
	c := putVM(t, e, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerShutdown)
	c.Config.Labels = map[string]string{"app": "web"}
	c.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}}
	c.LogPath, c.Reason, c.ImageRef = "/var/log/pods/x/vm.log", "Killed", "vm-image@sha256:ab"
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	st, err := e.R.StatusOf(t.Context(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Id != "c1" || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Reason != "Shutdown" ||
		st.Labels["app"] != "web" || st.LogPath != c.LogPath || st.ImageRef != c.ImageRef ||
		st.GetResources().GetLinux().GetMemoryLimitInBytes() != 128<<20 || st.GetImage().GetImage() != "vm-image" {
		t.Fatalf("StatusOf = %+v", st)
	}
	if _, err := e.R.StatusOf(t.Context(), "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("StatusOf(nope): %v", err)
	}
	if r, m, ok := core.PowerStatus(&store.Container{State: runtimeapi.ContainerState_CONTAINER_RUNNING}); ok || r != "" || m != "" {
		t.Fatal("a running VM has a power status")
	}
}

// TestEventOfAVMWithoutPod: the event still names the container.
func TestEventOfAVMWithoutPod(t *testing.T) {
	e := coretest.New(t)
	c := e.PutVM(t, "gone", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
	ev := e.R.Event(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	if ev.ContainerId != "c1" || ev.PodSandboxStatus != nil || len(ev.ContainersStatuses) != 1 || ev.CreatedAt == 0 {
		t.Fatalf("event %+v", ev)
	}
}

func TestSandboxStatus(t *testing.T) {
	e := coretest.New(t)
	sb := e.PutPod(t, "sb1", func(sb *store.Sandbox) {
		sb.Config.Labels = map[string]string{"a": "b"}
		sb.Config.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}}
	})
	st := core.SandboxStatus(sb)
	if st.Id != "sb1" || st.RuntimeHandler != "vm" || st.GetNetwork().GetIp() != "10.1.0.5" || st.Labels["a"] != "b" ||
		st.GetLinux().GetNamespaces().GetOptions().GetPid() != runtimeapi.NamespaceMode_POD {
		t.Fatalf("SandboxStatus = %+v", st)
	}
	if n := core.PodName(sb.Config); n != "ns/sb1" {
		t.Fatalf("PodName = %s", n)
	}
	putVM(t, e, "sb2", "c2", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	got, ctrs, err := e.R.SandboxWithContainers("sb2")
	if err != nil || got.ID != "sb2" || len(ctrs) != 1 || ctrs[0].ID != "c2" {
		t.Fatalf("SandboxWithContainers = %+v %v %v", got, ctrs, err)
	}
	if _, _, err := e.R.SandboxWithContainers("nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("SandboxWithContainers(nope): %v", err)
	}
}

// TestNewWithoutCounters: a runtime made without counters counts
// nothing, without failing.
func TestNewWithoutCounters(t *testing.T) {
	e := coretest.New(t)
	r := core.New(core.Options{StateDir: e.Dir, Accel: "auto"}, core.Parts{Store: e.R.Store, Conn: e.Libvirt, Log: coretest.Logger()})
	r.Counters.GCRemoved("domain", 1)
	r.Counters.Reconnected("qemu:///system")
	if r.Accel != "kvm" && r.Accel != "tcg" {
		t.Fatalf("Accel %q, want auto resolved", r.Accel)
	}
	if d := r.VMDir("c1"); d != e.Dir+"/vms/c1" {
		t.Fatalf("VMDir = %s", d)
	}
}
