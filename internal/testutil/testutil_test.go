package testutil

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprint(&b, "x")
			}
		}()
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("%d bytes written, want 800", got)
	}
}

func TestEventuallyRetriesUntilNil(t *testing.T) {
	calls := 0
	Eventually(t, 5*time.Second, "third call", func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

// recorder captures Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Eventually did not fail: %v", p)
			}
		}()
		Eventually(r, 50*time.Millisecond, "never", func() error { return errors.New("still down") })
	}()
	if want := "never: not within 50ms: still down"; r.msg != want {
		t.Fatalf("failure %q, want %q", r.msg, want)
	}
}
