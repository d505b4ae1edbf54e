package core

import (
	"errors"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// TestStarts: a grant is open only while its start is in flight, and is
// used once.
func TestStarts(t *testing.T) {
	var s Starts
	if s.Take("crimux-a") {
		t.Fatal("a grant without a start")
	}
	done := s.Arm("crimux-a")
	if s.Take("crimux-b") {
		t.Fatal("a grant for another domain")
	}
	if !s.Take("crimux-a") {
		t.Fatal("no grant during the start")
	}
	if s.Take("crimux-a") {
		t.Fatal("a grant used twice")
	}
	done()
	done2 := s.Arm("crimux-a")
	done3 := s.Arm("crimux-a")
	if !s.Take("crimux-a") || !s.Take("crimux-a") || s.Take("crimux-a") {
		t.Fatal("two starts in flight give exactly two grants")
	}
	done2()
	done3()
	if s.Take("crimux-a") || len(s.grants) != 0 {
		t.Fatalf("grants left after the starts: %v", s.grants)
	}
}

// TestStartWithoutRootDiskCheck: a runtime wired without its root disk
// check starts no qemu and arms no arrival; with it, the check's answer
// decides.
func TestStartWithoutRootDiskCheck(t *testing.T) {
	r := &Runtime{Starts: &Starts{}}
	c := &store.Container{ID: "c1", Domain: "crimux-c1"}
	started := false
	err := r.StartingQemu(c, func() error { started = true; return nil })
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || started {
		t.Fatalf("start without a check: err %v, started %v; want FailedPrecondition, not started", err, started)
	}
	if _, err := r.ArmIncoming(c); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("arrival without a check: %v, want FailedPrecondition", err)
	}
	refused := errors.New("the disk is not crimux's")
	r.RootDisks = diskCheck{refused}
	if err := r.StartingQemu(c, func() error { started = true; return nil }); !errors.Is(err, refused) || started {
		t.Fatalf("start the check refuses: err %v, started %v", err, started)
	}
	r.RootDisks = diskCheck{}
	if err := r.StartingQemu(c, func() error { started = true; return nil }); err != nil || !started {
		t.Fatalf("start the check lets through: err %v, started %v", err, started)
	}
}

type diskCheck struct{ err error }

func (d diskCheck) CheckRootDisk(*store.Container) error { return d.err }
