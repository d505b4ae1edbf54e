package cri

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
)

// Status calls travel as the raw forwarder's do (test/bench/rawproxy):
// the request as the bytes the client sent, the answer as the buffers the
// runtime sent (raw_reply.go). crimux reads one thing in the request, the
// ID that decides the route (field 1 of ContainerStatusRequest and of
// PodSandboxStatusRequest); decoding the request and encoding it again for
// containerd was a quarter of what crimux spent per ContainerStatus beyond
// the forwarder (perf, docs/benchmarks.md). The request's framing is
// checked whole: one that does not parse is refused here, naming the
// field, as a decoded one would be.

// rawRequest is a request as the client sent it (ServerCodec keeps its
// buffers); its holder frees them or hands them on (rawCodec sends them).
type rawRequest struct{ data mem.BufferSlice }

// free releases the request's buffers once nothing sends them.
func (r *rawRequest) free() { r.data.Free() }

// statusRequestID is the ID in field 1 of a status request (the last one,
// as protobuf decodes it), after checking that every field parses and
// that fields 1 (the ID) and 2 (verbose) have their types.
func statusRequestID(field string, b []byte) (string, error) {
	var id string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", errdefs.Invalid(field, "the request does not parse: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return "", errdefs.Invalid(field, "does not parse: %v", protowire.ParseError(n))
			}
			id, b = v, b[n:]
			continue
		case num == 1, num == 2 && typ != protowire.VarintType:
			return "", errdefs.Invalid(field, "the request's field %d has wire type %d", num, typ)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", errdefs.Invalid(field, "the request does not parse: %v", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return id, nil
}

// statusCall is one status method served raw: its name, the request's ID
// field, and how a runtime whose answers cannot pass through is asked
// (decodedAs: the request decoded from its bytes).
type statusCall struct {
	method, field string
	decoded       func(ctx context.Context, rt *registry.Runtime, field string, req []byte) (any, error)
}

// decodedAs asks a runtime with the request decoded as a Req; a request
// that does not decode is refused naming field.
func decodedAs[Req any, PReq interface {
	*Req
	proto.Message
}](ask func(runtimeapi.RuntimeServiceClient, context.Context, PReq) (proto.Message, error)) func(context.Context, *registry.Runtime, string, []byte) (any, error) {
	return func(ctx context.Context, rt *registry.Runtime, field string, b []byte) (any, error) {
		req := PReq(new(Req))
		if err := proto.Unmarshal(b, req); err != nil {
			return nil, errdefs.Invalid(field, "the request does not decode: %v", err)
		}
		resp, err := ask(rt.Backend.Runtime(), ctx, req)
		if err != nil {
			return nil, runtimeErr(rt, err)
		}
		return resp, nil
	}
}

// handler serves the call on the wire, as rawHandler does, with the
// request undecoded.
func (c statusCall) handler() grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := &rawRequest{}
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*Server)
		if interceptor == nil {
			return c.reply(s, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: c.method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return c.reply(s, ctx, req.(*rawRequest))
		})
	}
}

// reply routes req by its ID and passes it to the runtime as it came when
// the runtime's answers pass through (the answer then comes back as a
// *rawReply); otherwise it decodes it and asks the decoded way.
func (c statusCall) reply(s *Server, ctx context.Context, req *rawRequest) (any, error) {
	b := req.data.Materialize() // a few dozen bytes
	id, err := statusRequestID(c.field, b)
	if err != nil {
		req.free()
		return nil, err
	}
	rt, err := s.route(ctx, c.field, id)
	if err != nil {
		req.free()
		return nil, err
	}
	if conn := rawConnOf(rt); conn != nil {
		var answer rawAnswer
		// rawCodec hands the request's buffers to gRPC, which frees them.
		if err := conn.Invoke(ctx, c.method, req, &answer, grpc.ForceCodecV2(rawCodec{})); err != nil {
			return nil, runtimeErr(rt, err)
		}
		return &rawReply{data: answer.data}, nil
	}
	req.free()
	return c.decoded(ctx, rt, c.field, b)
}

// rawConnOf is rt's connection for answers passed through, or nil when its
// answers cannot be (registry.RawBackend).
func rawConnOf(rt *registry.Runtime) grpc.ClientConnInterface {
	if rb, ok := rt.Backend.(registry.RawBackend); ok {
		return rb.RawConn()
	}
	return nil
}

// viaWire is a status call for an in-process caller of the generated
// interface: req encoded as a client would send it, the answer as its
// message type.
func viaWire[M proto.Message](s *Server, ctx context.Context, c statusCall, req proto.Message, empty M) (M, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		var none M
		return none, err
	}
	answer, err := c.reply(s, ctx, &rawRequest{data: mem.BufferSlice{mem.SliceBuffer(b)}})
	return asMessage(answer, err, empty)
}
