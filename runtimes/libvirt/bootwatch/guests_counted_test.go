package bootwatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestGuestBootsCounted: the runtime's Counters hear of each boot watch's
// finding: a guest that shows itself in time is booted; one that shows
// nothing is stuck, and late once it shows itself after all.
func TestGuestBootsCounted(t *testing.T) {
	e := coretest.New(t, coretest.Options{GuestBootTimeout: 30 * time.Millisecond})
	e.R.Boots.Every = time.Millisecond
	e.R.Boots.Watch("quick", time.Now(), func() (string, bool) { return "a packet on its pod network", true })
	var shown atomic.Bool
	e.R.Boots.Watch("slow", time.Now(), func() (string, bool) { return "its guest agent connected", shown.Load() })
	events := func(what string) func() bool {
		return func() bool { return e.Counters.Events(what) == 1 }
	}
	waitUntil(t, "a boot counted", events("guest_boot booted"))
	waitUntil(t, "a stuck guest counted", events("guest_boot stuck"))
	if n := e.Counters.Events("guest_boot late"); n != 0 {
		t.Fatalf("%d late boots counted before the stuck guest showed itself", n)
	}
	shown.Store(true)
	waitUntil(t, "a late boot counted", events("guest_boot late"))
	if n := e.Counters.Events("guest_boot booted"); n != 1 {
		t.Errorf("%d boots in time counted, want 1: a late one is not", n)
	}
}
