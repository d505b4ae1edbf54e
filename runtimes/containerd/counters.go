package containerd

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Counters is what the containerd runtime counts, injected by the daemon
// (*metrics.Metrics implements it): the stray cgroups and orphaned tasks
// its sweep removed (kinds "container_cgroup", "orphan_task"), and the
// connections to containerd re-made after a loss.
type Counters interface {
	GCRemoved(kind string, n int)
	Reconnected(target string)
}

// noCounters counts nothing (no Counters given).
type noCounters struct{}

func (noCounters) GCRemoved(string, int) {}
func (noCounters) Reconnected(string)    {}

// watchReconnects calls reconnected every time conn becomes READY again
// after having been READY once: containerd restarted, or the connection
// broke and gRPC re-made it. It returns when conn is closed; run it in a
// goroutine.
func watchReconnects(conn *grpc.ClientConn, reconnected func()) {
	ctx := context.Background()
	wasReady := false
	for state := conn.GetState(); state != connectivity.Shutdown; state = conn.GetState() {
		if state == connectivity.Ready {
			if wasReady {
				reconnected()
			}
			wasReady = true
		}
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
	}
}
