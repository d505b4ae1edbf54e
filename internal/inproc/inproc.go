// Package inproc calls a gRPC service that lives in the same process
// without going through gRPC: a unary call is a function call on the
// service's handler, as its server would make it (the server's
// interceptor, the same codes), with the request and the answer copied
// as encoding them would copy them. Streams still go over a real
// connection. The VM runtime is reached so: in crimux's process, but
// called exactly as containerd is. Every CRI list asks it, and an
// in-memory gRPC round trip (both transports, their goroutines, encode and
// decode) took 30-47 µs per empty list here; the direct call 1-2 µs
// (BenchmarkEmptyList).
package inproc

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Conn is a grpc.ClientConnInterface on one service in this process.
type Conn struct {
	srv     any
	methods map[string]grpc.MethodDesc // by full method name
	server  grpc.UnaryServerInterceptor
	client  grpc.UnaryClientInterceptor
	streams grpc.ClientConnInterface
}

// New calls the unary methods of srv (registered as desc) directly:
// client, if not nil, is the interceptor the caller's connection applies
// (crimux's ID codec), server the one the service's server applies.
// Streams go to streams, a real connection to the same service.
func New(desc *grpc.ServiceDesc, srv any, server grpc.UnaryServerInterceptor, client grpc.UnaryClientInterceptor, streams grpc.ClientConnInterface) *Conn {
	c := &Conn{srv: srv, methods: map[string]grpc.MethodDesc{}, server: server, client: client, streams: streams}
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = m
	}
	return c
}

// Invoke makes a unary call.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if c.client != nil {
		return c.client(ctx, method, args, reply, nil, c.invoke, opts...)
	}
	return c.invoke(ctx, method, args, reply, nil, opts...)
}

// NewStream opens a stream on the real connection.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.streams.NewStream(ctx, desc, method, opts...)
}

// invoke runs the handler as the service's gRPC server would: on a
// context of its own that carries the caller's deadline and cancellation
// but none of its values, on a goroutine the caller stops waiting for
// when its context ends (a handler blocked in libvirt does not hold the
// caller past its deadline), with the handler's error reduced to the
// status a client would receive.
func (c *Conn) invoke(ctx context.Context, method string, args, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
	md, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", strings.TrimPrefix(method, "/"))
	}
	req, ok1 := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "inproc: %s: messages must be protobuf (%T, %T)", method, args, reply)
	}
	hctx, cancel := serverContext(ctx)
	defer cancel()
	type result struct {
		answer any
		err    error
	}
	done := make(chan result, 1)
	go func() {
		dec := func(v any) error {
			proto.Merge(v.(proto.Message), req)
			return nil
		}
		answer, err := md.Handler(c.srv, hctx, dec, c.server)
		done <- result{answer, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return asStatus(r.err)
		}
		if m, ok := r.answer.(proto.Message); ok {
			proto.Reset(out)
			proto.Merge(out, m) // a copy: the runtime may answer with what it keeps
		}
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// asStatus is the status grpc-go's server sends for a handler's error:
// its own status, the code of a context error (a handler that ends with
// its deadline returns ctx.Err()), Unknown for the rest.
func asStatus(err error) error {
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	return status.FromContextError(err).Err()
}

// serverContext is what a gRPC server would give the handler: the
// caller's deadline, cancelled with the caller, no values.
func serverContext(ctx context.Context) (context.Context, context.CancelFunc) {
	base, cancelBase := context.WithCancel(context.Background())
	hctx, cancelDeadline := base, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		hctx, cancelDeadline = context.WithDeadline(base, dl)
	}
	stop := context.AfterFunc(ctx, cancelBase)
	return hctx, func() { stop(); cancelDeadline(); cancelBase() }
}
