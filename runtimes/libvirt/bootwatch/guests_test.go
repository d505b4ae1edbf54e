package bootwatch_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/vmtypes"
)

type boots struct {
	mu  sync.Mutex
	got []bootwatch.GuestBoot
}

func (b *boots) add(g bootwatch.GuestBoot) {
	b.mu.Lock()
	b.got = append(b.got, g)
	b.mu.Unlock()
}

func (b *boots) list() []bootwatch.GuestBoot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bootwatch.GuestBoot(nil), b.got...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestGuestNotBooted: a guest that sends nothing is reported stuck in its
// CRI status, its log and to OnGuestBoot; its first packet clears it.
func TestGuestNotBooted(t *testing.T) {
	var seen boots
	const timeout = 300 * time.Millisecond
	e := coretest.New(t, coretest.Options{GuestBootTimeout: timeout, OnGuestBoot: seen.add})
	e.R.Boots.Every = 2 * time.Millisecond
	e.PutPod(t, "p1", nil)
	c := e.PutVM(t, "p1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	c.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	e.Net.SetPackets(7) // the tap carried a previous boot's packets
	started := time.Now()
	e.R.WatchBoot(c, started, true)

	status := func() *runtimeapi.ContainerStatus {
		st, err := e.R.StatusOf(t.Context(), "c1")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Before the timeout, when this host is quick enough to tell.
	if st := status(); st.Reason != "" && time.Since(started) < timeout/2 {
		t.Fatalf("reason %q before the timeout", st.Reason)
	}
	waitUntil(t, "GuestNotBooted", func() bool { return status().Reason == bootwatch.ReasonGuestNotBooted })
	if st := status(); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !strings.Contains(st.Message, "stuck in its firmware or boot loader") {
		t.Fatalf("status %v %q", st.State, st.Message)
	}
	// The status turns first; the log line and the notice follow it.
	waitUntil(t, "the GuestNotBooted notice", func() bool { return len(seen.list()) > 0 })
	got := seen.list()
	if len(got) != 1 || got[0].Booted || got[0].Pod.GetName() != "p1" || got[0].Pod.GetUid() != "p1-uid" {
		t.Fatalf("notices %+v", got)
	}
	log, _ := os.ReadFile(c.LogPath)
	if !strings.Contains(string(log), " stderr F crimux: no sign of the guest's operating system") {
		t.Fatalf("log %q", log)
	}

	e.Net.SetPackets(8)
	waitUntil(t, "the late boot", func() bool { return status().Reason == "" })
	waitUntil(t, "the GuestBooted notice", func() bool { return len(seen.list()) == 2 })
	if g := seen.list()[1]; !g.Booted || !strings.Contains(g.Message, "a packet on its pod network") {
		t.Fatalf("notice %+v", g)
	}
}

// TestGuestBootRecovered: a VM found running at start-up whose tap ever
// carried a packet is booted at once, however long ago it started.
func TestGuestBootRecovered(t *testing.T) {
	var seen boots
	e := coretest.New(t, coretest.Options{GuestBootTimeout: time.Millisecond, OnGuestBoot: seen.add})
	e.R.Boots.Every = time.Millisecond
	e.PutPod(t, "p1", nil)
	c := e.PutVM(t, "p1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.Net.SetPackets(1)
	e.R.WatchBoot(c, time.Now().Add(-time.Hour), false)
	time.Sleep(20 * time.Millisecond)
	if st, err := e.R.StatusOf(t.Context(), "c1"); err != nil || st.Reason != "" {
		t.Fatalf("status %v, %v", st, err)
	}
	if got := seen.list(); len(got) != 0 {
		t.Fatalf("notices %+v", got)
	}
}
