package virt

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testbed"
)

// TestConnCloseKeepsLibvirtdUp: connecting, following events and shutting
// down, many times over, never crashes libvirtd. Cancelling the event
// subscriptions before closing the connection (go-libvirt then
// deregisters while the close is on its way) crashed Debian 12's libvirtd
// within a few hundred rounds; see conn.run.
func TestConnCloseKeepsLibvirtdUp(t *testing.T) {
	testbed.Require(t)
	before := libvirtdPID(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const rounds = 2000
	for i := 0; i < rounds; i++ {
		subscribed := make(chan struct{}, 1)
		c, err := NewConn("qemu:///system", log, func(ctx context.Context, l Libvirt) {
			defer close(subscribed)
			lifecycle, err := l.LifecycleEvents(ctx)
			if err != nil {
				t.Errorf("subscribe to lifecycle events: %v", err)
				return
			}
			reboots, err := l.RebootEvents(ctx)
			if err != nil {
				t.Errorf("subscribe to reboot events: %v", err)
				return
			}
			subscribed <- struct{}{}
			for range lifecycle {
			}
			for range reboots {
			}
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go c.Run(ctx)
		select {
		case <-subscribed:
		case <-time.After(10 * time.Second):
			now, _ := exec.Command("pidof", "libvirtd").Output()
			t.Fatalf("round %d: no connection to libvirtd within 10s; libvirtd pid was %s, is %q (crashed?)", i, before, strings.TrimSpace(string(now)))
		}
		cancel()
		<-c.done
		if t.Failed() {
			return
		}
	}
	if after := libvirtdPID(t); after != before {
		t.Fatalf("libvirtd pid %s after %d connect/subscribe/close rounds, was %s: it crashed", after, rounds, before)
	}
}

func libvirtdPID(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("pidof", "libvirtd").Output()
	testbed.Need(t, err, "libvirtd is not running (test/bed/libvirt-up.sh)")
	if _, err := os.Stat(defaultSocket); err != nil {
		testbed.Need(t, err, "libvirtd socket")
	}
	return strings.TrimSpace(string(out))
}
