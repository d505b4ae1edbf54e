package metrics

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// WatchReconnects counts into Reconnects every time conn becomes READY
// again after having been READY once: containerd restarted, or the
// connection broke and gRPC re-made it. It returns when conn is closed;
// run it in a goroutine.
func WatchReconnects(conn *grpc.ClientConn, target string) {
	ctx := context.Background()
	wasReady := false
	for state := conn.GetState(); state != connectivity.Shutdown; state = conn.GetState() {
		if state == connectivity.Ready {
			if wasReady {
				Reconnects.WithLabelValues(target).Inc()
			}
			wasReady = true
		}
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
	}
}
