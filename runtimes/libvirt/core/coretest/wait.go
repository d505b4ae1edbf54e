package coretest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// WaitTimeout is how long WaitFor waits before it fails the test.
const WaitTimeout = 5 * time.Second

// WaitFor polls cond every few milliseconds until it holds and fails the
// test, naming what it waited for, if it does not within WaitTimeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", WaitTimeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Connect runs the runtime's OnConnect on the fake libvirtd in a
// goroutine, as the host's connection does on every connect, and waits
// until the runtime has recovered (the first pass: resync, then
// AfterResync). The returned stop cancels the context, disconnects the
// fake (its event streams close; the fake cannot connect again) and waits
// for OnConnect to return; it also runs at the end of the test.
func (e *Env) Connect(t testing.TB) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.R.OnConnect(ctx, e.Libvirt)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			e.Libvirt.Disconnect()
			<-done
		})
	}
	t.Cleanup(stop)
	select {
	case <-e.R.Recovered():
	case <-time.After(WaitTimeout):
		t.Fatal("the runtime did not recover after connecting")
	}
	return stop
}

// Record returns the record of container id whatever its intent
// (Creating and Removing included), or nil when there is none.
func (e *Env) Record(t testing.TB, id string) *store.Container {
	t.Helper()
	c, err := e.R.Store.AnyContainer(id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}
