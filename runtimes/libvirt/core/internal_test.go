package core

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

func TestRebootWatch(t *testing.T) {
	w := NewRebootWatch()
	l := virtfake.New()
	if _, _, err := w.Wait(l, "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait before follow: %v, want Unavailable", err)
	}
	unfollow := w.Follow(l)
	d1, cancel1, err := w.Wait(l, "d1")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel1()
	d2, cancel2, err := w.Wait(l, "d2")
	if err != nil {
		t.Fatal(err)
	}
	w.Fire("d1")
	select {
	case <-d1:
	default:
		t.Fatal("d1's waiter not woken by its reboot")
	}
	select {
	case <-d2:
		t.Fatal("d2's waiter woken by d1's reboot")
	default:
	}
	cancel2()
	w.Fire("d2") // no waiter left: nothing to close twice
	if len(w.waiters) != 0 {
		t.Fatalf("waiters left: %v", w.waiters)
	}
	if _, _, err := w.Wait(virtfake.New(), "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait on another connection: %v, want Unavailable", err)
	}
	unfollow()
	if _, _, err := w.Wait(l, "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait after the subscription ended: %v, want Unavailable", err)
	}
}

// TestRebootWatchUnfollowOfAnOldConnection: the end of an old
// connection's subscription does not unfollow the new one's.
func TestRebootWatchUnfollowOfAnOldConnection(t *testing.T) {
	w := NewRebootWatch()
	old, cur := virtfake.New(), virtfake.New()
	unfollowOld := w.Follow(old)
	w.Follow(cur)
	unfollowOld()
	if _, cancel, err := w.Wait(cur, "d1"); err != nil {
		t.Fatalf("wait on the current connection after the old one ended: %v", err)
	} else {
		cancel()
		cancel() // twice: harmless
	}
}

func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		why    virt.StopReason
		code   int32
		reason string
	}{
		{virt.StopShutdown, ExitClean, "Completed"},
		{virt.StopCrashed, ExitCrashed, "Crashed"},
		{virt.StopFailed, ExitCrashed, "Crashed"},
		{virt.StopDestroyed, ExitKilled, "Killed"},
		{virt.StopSaved, ExitKilled, "Killed"},
		{virt.StopOther, ExitKilled, "Killed"},
		{virt.StopMigrated, ExitClean, "Migrated"},
	} {
		if code, reason := exitOf(tc.why); code != tc.code || reason != tc.reason {
			t.Errorf("exitOf(%d) = %d %q, want %d %q", tc.why, code, reason, tc.code, tc.reason)
		}
	}
}

// TestLocks: one holder per key at a time, other keys free, and no lock
// kept once nobody holds or waits for it.
func TestLocks(t *testing.T) {
	var k Locks
	unlockA := k.Lock("a")
	unlockB := k.Lock("b") // another key: not blocked
	got := make(chan struct{})
	go func() {
		defer k.Lock("a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second holder got the lock of a")
	case <-time.After(20 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock after its release")
	}
	unlockB()
	deadline := time.Now().Add(5 * time.Second)
	for {
		k.mu.Lock()
		n := len(k.locks)
		k.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d locks kept with no holder", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLocksSerialise(t *testing.T) {
	var k Locks
	var wg sync.WaitGroup
	n := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer k.Lock("pod")()
			n++ // the race detector fails the test if two hold the lock
		}()
	}
	wg.Wait()
	if n != 50 {
		t.Fatalf("n = %d, want 50", n)
	}
}

// TestRollback: steps undone last first, a failing step does not stop
// the others.
func TestRollback(t *testing.T) {
	var undone []string
	var rb Rollback
	for _, s := range []string{"record", "dir", "domain"} {
		rb.Add(s, func() error {
			undone = append(undone, s)
			if s == "dir" {
				return errors.New("busy")
			}
			return nil
		})
	}
	rb.Run(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if want := []string{"domain", "dir", "record"}; !slices.Equal(undone, want) {
		t.Fatalf("undone %v, want %v", undone, want)
	}
	var empty Rollback
	empty.Run(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestResolveAccel(t *testing.T) {
	dir := t.TempDir()
	present, absent := filepath.Join(dir, "kvm"), filepath.Join(dir, "none")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(d string) { devKVM = d }(devKVM)
	works := func() error { return nil }
	broken := func() error { return errors.New("failed to set MSR 0x10a") }
	for _, tc := range []struct {
		accel, dev string
		probe      func() error
		want       string
	}{
		{vm.AccelKVM, absent, broken, vm.AccelKVM}, // asked for: as is
		{vm.AccelTCG, present, works, vm.AccelTCG},
		{"auto", absent, works, vm.AccelTCG},
		{"", present, works, vm.AccelKVM},
		{"auto", present, works, vm.AccelKVM},
		{"auto", present, broken, vm.AccelTCG}, // nested KVM that aborts qemu
	} {
		devKVM = tc.dev
		if got := resolveAccel(tc.accel, tc.probe, slog.Default()); got != tc.want {
			t.Errorf("resolveAccel(%q) with %s, probe %v = %s, want %s", tc.accel, filepath.Base(tc.dev), tc.probe(), got, tc.want)
		}
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if len(a) != 32 || a == b {
		t.Fatalf("NewID: %q, %q; want 32 hex digits, different", a, b)
	}
	if !store.ValidID(a) || !store.ValidID(b) {
		t.Fatalf("NewID minted %q, %q, which ValidID refuses", a, b)
	}
	for _, id := range []string{"", "c1", a[:31], a + "0", strings.ToUpper(a), "../../../../etc/passwd00000000000", a[:31] + "g", a[:31] + "/"} {
		if store.ValidID(id) {
			t.Errorf("store.ValidID(%q) = true", id)
		}
	}
}
