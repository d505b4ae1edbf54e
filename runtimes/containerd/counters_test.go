package containerd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/containerd"
)

// countingCounters records what a backend counts.
type countingCounters struct {
	mu         sync.Mutex
	removed    map[string]int
	reconnects []string
}

func (c *countingCounters) GCRemoved(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed == nil {
		c.removed = map[string]int{}
	}
	c.removed[kind] += n
}

func (c *countingCounters) Reconnected(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconnects = append(c.reconnects, target)
}

func (c *countingCounters) reconnectTargets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reconnects...)
}

// TestCountsReconnects: a connection re-made after containerd restarted
// is counted against its endpoint, through the Counters given; the first
// connection is not.
func TestCountsReconnects(t *testing.T) {
	counters := &countingCounters{}
	srv := crifake.Serve(t, crifake.New("ctrd"), crifake.SocketPath(t, "containerd.sock"))
	b, err := containerd.Dial(srv.Endpoint(), containerd.Options{CallTimeout: callTimeout, Counters: counters})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	version := func() error {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := b.Runtime().Version(c, &runtimeapi.VersionRequest{})
		return err
	}
	if err := version(); err != nil {
		t.Fatalf("Version: %v", err)
	}
	if got := counters.reconnectTargets(); len(got) != 0 {
		t.Fatalf("the first connection was counted as a reconnect: %v", got)
	}
	srv.Stop()
	crifake.Serve(t, crifake.New("ctrd"), srv.Path)
	testutil.Eventually(t, 10*time.Second, "a counted reconnect", func() error {
		if err := version(); err != nil {
			return err
		}
		if got := counters.reconnectTargets(); len(got) != 1 || got[0] != srv.Endpoint() {
			return fmt.Errorf("reconnects counted: %v, want one to %s", got, srv.Endpoint())
		}
		return nil
	})
}

// TestNilCountersCountNothing: a backend without Counters works, and
// survives a reconnect.
func TestNilCountersCountNothing(t *testing.T) {
	_, srv, b := serve(t, nil)
	srv.Stop()
	crifake.Serve(t, crifake.New("ctrd"), srv.Path)
	testutil.Eventually(t, 10*time.Second, "Version after the restart", func() error {
		_, err := b.Runtime().Version(context.Background(), &runtimeapi.VersionRequest{})
		return err
	})
}
