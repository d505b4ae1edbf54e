// Package containerd is crimux's container runtime: a CRI v1 client of a
// real containerd. Every call gets a deadline of its own (RunPodSandbox
// more, StopContainer and ExecSync their timeouts on top); the connection
// reconnects with backoff when containerd restarts; readiness is
// containerd's own Status, asked by the CRI server. What it counts
// (reconnects, what its cgroup sweep removed) goes to the Counters the
// daemon hands its Factory.
package containerd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/registry"
)

// maxMsgSize matches kubelet's: list responses of busy nodes are large.
const maxMsgSize = 16 << 20

// windowSize is the HTTP/2 flow-control window crimux grants containerd
// (per stream and per connection). gRPC's default of 64 KiB is smaller
// than a list of 200 containers, so containerd stalled mid-answer until
// crimux's window update came back, a round trip per 64 KiB
// (docs/benchmarks.md). The socket is local: memory, not bandwidth, is
// what a window costs.
const windowSize = 4 << 20

// Factory makes containerd backends; the global [containerd] section gives
// the defaults an entry may override.
type Factory struct {
	Defaults config.Containerd
	// StateDir holds the records of the stray-cgroup sweep ("": no sweep).
	StateDir string
	// Counters receives what the backends count (metrics); nil counts
	// nothing.
	Counters Counters
	Log      *slog.Logger
}

// Key makes entries with the same endpoint share one connection.
func (f Factory) Key(rt config.Runtime) string { return f.endpoint(rt) }

func (f Factory) endpoint(rt config.Runtime) string {
	if rt.Endpoint != "" {
		return rt.Endpoint
	}
	return f.Defaults.Endpoint
}

// New dials lazily: containerd may start after crimux.
func (f Factory) New(_ context.Context, rt config.Runtime, codec *idcodec.Codec) (registry.Backend, error) {
	return Dial(f.endpoint(rt), Options{CallTimeout: f.Defaults.CallTimeout.Duration, Codec: codec, StateDir: f.StateDir,
		Counters: f.Counters, Log: f.Log})
}

// Options tune a backend.
type Options struct {
	// CallTimeout is the deadline of one ordinary call.
	CallTimeout time.Duration
	// Codec, when set, rewrites IDs for a non-primary runtime.
	Codec *idcodec.Codec
	// StateDir, when set, turns on the sweep of stray container cgroups
	// (cgroupgc) with its records there.
	StateDir string
	// Counters receives what the backend counts; nil counts nothing.
	Counters Counters
	Log      *slog.Logger
}

// Backend is a connection to containerd's CRI service.
type Backend struct {
	conn *grpc.ClientConn
	// base is the ordinary call's deadline (SetCallTimeout).
	base *callBase
	// raw: the connection's answers need no ID rewriting (no codec).
	raw     bool
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	stop    context.CancelFunc
}

// Dial connects to endpoint ("unix:///path"). The connection is made on
// first use and remade with backoff whenever containerd goes away.
func Dial(endpoint string, opts Options) (*Backend, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || path == "" {
		return nil, fmt.Errorf("endpoint %q: must be unix:///path", endpoint)
	}
	opts = opts.withDefaults()
	base := newCallBase(opts.CallTimeout)
	unary := []grpc.UnaryClientInterceptor{deadlines(base)}
	release := func() {}
	var shared *sweep
	if opts.StateDir != "" {
		sw, rel, err := acquireSweep(opts.StateDir, endpoint, path, opts.Counters, opts.Log)
		if err != nil {
			return nil, err
		}
		release, shared = rel, sw
		unary = append(unary, recordParents(sw.sweeper, opts.Log), sw.reaper.count)
	}
	var stream []grpc.StreamClientInterceptor
	if opts.Codec != nil {
		unary = append(unary, opts.Codec.UnaryClientInterceptor())
		stream = append(stream, opts.Codec.StreamClientInterceptor())
	}
	if shared != nil {
		unary = append(unary, unstickRemovals(shared.reaper, opts.Log))
	}
	conn, err := grpc.NewClient("unix://"+path, dialOptions(unary, stream)...)
	if err != nil {
		release()
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	go watchReconnects(conn, func() { opts.Counters.Reconnected(endpoint) })
	b := &Backend{
		conn:    conn,
		base:    base,
		raw:     opts.Codec == nil,
		runtime: runtimeapi.NewRuntimeServiceClient(conn),
		images:  runtimeapi.NewImageServiceClient(conn),
		stop:    release,
	}
	return b, nil
}

// withDefaults is opts with its unset fields set: a call timeout of two
// minutes, the default logger, no counters.
func (opts Options) withDefaults() Options {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 2 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Counters == nil {
		opts.Counters = noCounters{}
	}
	return opts
}

// dialOptions are the connection's options: large messages and windows,
// a quick reconnect with backoff, and the interceptors.
func dialOptions(unary []grpc.UnaryClientInterceptor, stream []grpc.StreamClientInterceptor) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		grpc.WithChainUnaryInterceptor(unary...),
		grpc.WithChainStreamInterceptor(stream...),
	}
}

// SetCallTimeout makes d the deadline of the ordinary calls made from
// now on (containerd.call_timeout on a config reload); calls in flight
// keep theirs.
func (b *Backend) SetCallTimeout(d time.Duration) {
	if d > 0 {
		b.base.ns.Store(int64(d))
	}
}

// CallTimeouter is the ability a config reload hands
// containerd.call_timeout to (a container runtime's backend has it).
type CallTimeouter interface{ SetCallTimeout(time.Duration) }

var _ CallTimeouter = (*Backend)(nil)

// Runtime returns the RuntimeService client.
func (b *Backend) Runtime() runtimeapi.RuntimeServiceClient { return b.runtime }

// RawConn returns the connection for pass-through calls when containerd's
// IDs are shown unchanged (registry.RawBackend); nil when a codec rewrites
// them.
func (b *Backend) RawConn() grpc.ClientConnInterface {
	if !b.raw {
		return nil
	}
	return b.conn
}

// Images returns the ImageService client.
func (b *Backend) Images() runtimeapi.ImageServiceClient { return b.images }

// Close stops the sweep and closes the connection.
func (b *Backend) Close() error {
	b.stop()
	return b.conn.Close()
}
