package rebootwatch

import (
	"errors"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
)

func TestRebootWatch(t *testing.T) {
	w := New()
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
	w := New()
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
