package instant

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestRestoresTakeTurns: as many restores at once as the host has CPUs;
// one more waits for a turn, or for its context's end.
func TestRestoresTakeTurns(t *testing.T) {
	var r Restores
	var dones []func()
	for range runtime.NumCPU() {
		done, err := r.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Begin(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a restore beyond the CPUs: %v, want it to wait", err)
	}
	dones[0]()
	done, err := r.Begin(context.Background())
	if err != nil {
		t.Fatalf("a restore once a turn ended: %v", err)
	}
	done()
}
