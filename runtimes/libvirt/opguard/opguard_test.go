package opguard

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

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

// TestLocksHolders: Holders counts the holder and the waiters of a key,
// and none once they are gone.
func TestLocksHolders(t *testing.T) {
	var k Locks
	unlock := k.Lock("a")
	got := make(chan struct{})
	go func() {
		defer k.Lock("a")()
		close(got)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for k.Holders("a") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("holders of a: %d, want 2", k.Holders("a"))
		}
		time.Sleep(time.Millisecond)
	}
	if n := k.Holders("b"); n != 0 {
		t.Fatalf("holders of b: %d", n)
	}
	unlock()
	<-got
	for k.Holders("a") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("holders of a after both: %d", k.Holders("a"))
		}
		time.Sleep(time.Millisecond)
	}
}
