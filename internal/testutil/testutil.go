// Package testutil holds the small helpers several packages' tests share.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers, such as a
// logger shared by a server's goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Eventually calls f until it returns nil, polling every 10 ms at first
// and backing off to every 200 ms, and fails t with f's last error when
// timeout passes. what says what was waited for.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	EventuallyEvery(t, timeout, 200*time.Millisecond, what, f)
}

// EventuallyEvery is Eventually with at most every between tries: for a
// try that costs what it waits for (an exec through kubelet into a VM
// that is still booting, on the same few CPUs).
func EventuallyEvery(t testing.TB, timeout, every time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	poll := 10 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(poll)
		poll = min(2*poll, every)
	}
}
