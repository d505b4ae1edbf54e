package libvirt

import (
	"errors"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestRebootWatch(t *testing.T) {
	w := newRebootWatch()
	l := &golibvirt.Libvirt{}
	if _, _, err := w.wait(l, "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait before follow: %v, want Unavailable", err)
	}
	unfollow := w.follow(l)
	d1, cancel1, err := w.wait(l, "d1")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel1()
	d2, cancel2, err := w.wait(l, "d2")
	if err != nil {
		t.Fatal(err)
	}
	w.fire("d1")
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
	w.fire("d2") // no waiter left: nothing to close twice
	if len(w.waiters) != 0 {
		t.Fatalf("waiters left: %v", w.waiters)
	}
	if _, _, err := w.wait(&golibvirt.Libvirt{}, "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait on another connection: %v, want Unavailable", err)
	}
	unfollow()
	if _, _, err := w.wait(l, "d1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wait after the subscription ended: %v, want Unavailable", err)
	}
}
