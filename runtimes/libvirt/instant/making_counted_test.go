package instant

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestMakingsCounted: the runtime's Counters hear how each making ended:
// ready, failed, or cancelled when no pod asked for it any more. A
// template that exists already is no making.
func TestMakingsCounted(t *testing.T) {
	f := &fakeBoot{}
	m, e := newMaker(t, f)
	if _, err := m.Make(t.Context(), request("ns", 256)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Make(t.Context(), request("ns", 256)); err != nil { // ready already
		t.Fatal(err)
	}
	f.mu.Lock()
	f.fail = errors.New("no agent")
	f.mu.Unlock()
	if _, err := m.Make(t.Context(), request("ns", 512)); err == nil {
		t.Fatal("a failing making succeeded")
	}
	f.mu.Lock()
	f.fail, f.hold = nil, make(chan struct{})
	f.mu.Unlock()
	defer close(f.hold)
	if err := m.Start(request("ns", 1024), "pod-a"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the making", func() error {
		if now, _, _ := f.counts(); now != 1 {
			return fmt.Errorf("%d making", now)
		}
		return nil
	})
	m.Forget("pod-a")
	waitIdle(t, m)
	for what, want := range map[string]int{"template_making ready": 1, "template_making failed": 1, "template_making cancelled": 1} {
		if n := e.Counters.Events(what); n != want {
			t.Errorf("%s: %d, want %d", what, n, want)
		}
	}
}
