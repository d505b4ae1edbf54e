package nospace_test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/nospace"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// TestPausedOnFullDisk: a VM qemu paused on a full disk says so in its CRI
// status and is resumed by crimux once there is room (here at once: the
// test's state dir has room); one its user paused since is left paused.
func TestPausedOnFullDisk(t *testing.T) {
	e := coretest.New(t)
	e.PutPod(t, "p1", nil)
	c := e.PutVM(t, "p1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	l, dom, err := e.R.DomainOf(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Suspend(dom); err != nil { // as qemu does on ENOSPC
		t.Fatal(err)
	}
	e.R.NoSpace.OnPaused(c.Domain) // libvirt's event: paused on an I/O error
	st, err := e.R.StatusOf(t.Context(), c.ID)
	if err != nil || st.Reason != nospace.ReasonPaused || !strings.Contains(st.Message, "filesystem full") ||
		st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("status %v %q %q, %v", st.GetState(), st.GetReason(), st.GetMessage(), err)
	}
	e.R.NoSpace.Resume(c.Domain)
	if s, _ := l.State(dom); s != virt.StateRunning {
		t.Fatalf("domain %v after the resume", s)
	}
	if st, _ := e.R.StatusOf(t.Context(), c.ID); st.Reason != "" {
		t.Fatalf("reason %q after the resume", st.Reason)
	}

	// Paused by its user after qemu paused it: left alone.
	if err := l.Suspend(dom); err != nil {
		t.Fatal(err)
	}
	e.R.NoSpace.OnPaused(c.Domain) // libvirt's event: paused on an I/O error
	c.PowerState = vmtypes.PowerPaused
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	e.R.NoSpace.Resume(c.Domain)
	if s, _ := l.State(dom); s != virt.StatePaused {
		t.Fatalf("a VM its user paused was resumed: %v", s)
	}
	if _, ok := e.R.NoSpace.Paused(c.Domain); ok {
		t.Fatal("still counted as paused on a full disk")
	}
}
