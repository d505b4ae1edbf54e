package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/crimux/crimux/internal/route"
)

// Runtime labels of calls that are not routed to one runtime (see
// internal/route, which the code routing a call records into).
const (
	RuntimeAll  = route.All
	RuntimeNone = route.None
)

// UnaryServerInterceptor times every unary call and counts its errors,
// labelled with the runtime the handler routed the call to: it gives the
// call a route slot (internal/route) and reads it once the handler
// returns, so the routing is decided once, by the handler. It must run
// outside the interceptor that turns errors into gRPC statuses (first in
// the chain), so it sees the codes clients see.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, slot := route.With(ctx)
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observe(info.FullMethod, slot.Runtime(), time.Since(start), err)
		return resp, err
	}
}

// StreamServerInterceptor does the same for streaming calls. Today's
// streams fan out (events, stats, metrics) and record nothing: "all".
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, slot := route.With(ss.Context())
		start := time.Now()
		err := handler(srv, &routedStream{ServerStream: ss, ctx: ctx})
		m.observe(info.FullMethod, slot.Runtime(), time.Since(start), err)
		return err
	}
}

// routedStream is a stream whose context carries the call's route slot.
type routedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *routedStream) Context() context.Context { return s.ctx }

func (m *Metrics) observe(method, runtime string, d time.Duration, err error) {
	m.duration(method, runtime).Observe(d.Seconds())
	if err != nil {
		api, rpc := splitMethod(method)
		m.rpcErrors.WithLabelValues(api, rpc, runtime, status.Code(err).String()).Inc()
	}
}

// durationKey is one histogram of rpcDuration: the call's full method and
// its runtime (a bounded set: the served methods times the runtimes).
type durationKey struct{ method, runtime string }

// duration is the histogram of method's calls routed to runtime. Looking
// it up by label values splits the method, checks and hashes the labels
// on every call (~3 % of crimux's CPU per proxied ContainerStatus,
// docs/benchmarks.md): the histograms are kept once found. rpcDuration's
// label sets are never deleted, so a kept one stays the one exported.
func (m *Metrics) duration(method, runtime string) prometheus.Observer {
	key := durationKey{method, runtime}
	if o, ok := m.durations.Load(key); ok {
		return o.(prometheus.Observer)
	}
	api, rpc := splitMethod(method)
	o := m.rpcDuration.WithLabelValues(api, rpc, runtime)
	m.durations.Store(key, o)
	return o
}

// splitMethod turns "/runtime.v1.RuntimeService/RunPodSandbox" into
// ("cri", "RunPodSandbox") and "/crimux.vm.v1.VMService/GetVM" into
// ("vm", "GetVM"); other services keep their full name.
func splitMethod(method string) (api, rpc string) {
	service, rpc, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return "unknown", method
	}
	switch {
	case strings.HasPrefix(service, "runtime.v1."):
		return "cri", rpc
	case strings.HasPrefix(service, "crimux.vm."):
		return "vm", rpc
	}
	return service, rpc
}
