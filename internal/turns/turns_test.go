package turns

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTurnsAreTakenInArrivalOrder: callers that queue one after another
// get their turns in that order.
func TestTurnsAreTakenInArrivalOrder(t *testing.T) {
	const callers = 12
	g := New(1, time.Minute)
	holder, _ := g.Take(context.Background())
	var (
		order []int // appended while holding the only turn
		wg    sync.WaitGroup
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, err := g.Take(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			order = append(order, i)
			done()
		}()
		waitQueued(t, g, i+1)
	}
	holder()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("turns taken in order %v, want 0..%d", order, callers-1)
		}
	}
}

// TestNoMoreThanTheWidthHoldATurn: of many callers at once, at most the
// width run at a time, and all of them run.
func TestNoMoreThanTheWidthHoldATurn(t *testing.T) {
	const width, callers = 3, 40
	g := New(width, time.Minute)
	var running, most, ran atomic.Int32
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, err := g.Take(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			ran.Add(1)
			done()
		}()
	}
	wg.Wait()
	if most.Load() > width || ran.Load() != callers {
		t.Fatalf("%d ran, at most %d at once; want %d, at most %d", ran.Load(), most.Load(), callers, width)
	}
}

// waitQueued waits until n callers wait on g's full channel.
func waitQueued(t *testing.T, g *Gate, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for queued(g) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", queued(g), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestCallerGoesAheadAfterMaxWait(t *testing.T) {
	g := New(1, 20*time.Millisecond)
	hung, _ := g.Take(context.Background()) // a step that never ends
	defer hung()
	start := time.Now()
	done, err := g.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done() // no turn was held: must not free the hung caller's
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("went ahead after %s, before the max wait", waited)
	}
	if len(g.slots) != 1 {
		t.Fatalf("%d turns held, want the hung caller's only", len(g.slots))
	}
}

func TestTakeEndsWithItsContext(t *testing.T) {
	g := New(1, time.Minute)
	held, _ := g.Take(context.Background())
	defer held()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := g.Take(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take = %v, want the context's deadline", err)
	}
}

func TestNilGateNeverWaits(t *testing.T) {
	var g *Gate
	done, err := g.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done()
}
