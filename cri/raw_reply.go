package cri

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Answers passed through (list_raw.go, raw_request.go) leave crimux as the
// buffers gRPC received them in, as the raw forwarder of the bench sends
// them (test/bench/rawproxy): no copy into one slice, no message around
// them. Copying a 200-container list (≈ 100 KiB) into one slice was, with
// the garbage collection it caused, half of what crimux spent per list
// beyond the forwarder (perf, docs/benchmarks.md).
//
// The generated service hands a handler's answer to the codec as the
// message type the method declares; the methods that pass answers through
// are served by handlers of their own instead (rawMethods), which answer
// with a *rawReply: ServerCodec sends its buffers as they are, and gRPC
// frees them once written. Register serves these, so a server registering
// crimux's services must use ServerCodec.

// rawReply is an answer's encoding as buffers: the runtime's, then any
// bytes appended (the other runtimes' list items).
type rawReply struct{ data mem.BufferSlice }

// rawMethods are the RuntimeService methods whose answers may pass
// through, each with what serves it on the wire: a *rawReply, or the
// decoded answer when it cannot pass through.
var rawMethods = map[string]grpc.MethodHandler{
	"ListContainers":   rawHandler(runtimeapi.RuntimeService_ListContainers_FullMethodName, (*Server).listContainersReply),
	"ListPodSandbox":   rawHandler(runtimeapi.RuntimeService_ListPodSandbox_FullMethodName, (*Server).listSandboxesReply),
	"ContainerStatus":  containerStatus.handler(),
	"PodSandboxStatus": sandboxStatus.handler(),
}

// runtimeServiceDesc is the generated RuntimeService with rawMethods'
// handlers in place of the generated ones.
func runtimeServiceDesc() *grpc.ServiceDesc {
	desc := runtimeapi.RuntimeService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i, m := range desc.Methods {
		if h, ok := rawMethods[m.MethodName]; ok {
			desc.Methods[i].Handler = h
		}
	}
	return &desc
}

// rawHandler is a unary handler as the generated ones are (the request
// decoded, the interceptors run with the method's name), calling reply,
// whose answer may be a *rawReply.
func rawHandler[Req any, PReq interface {
	*Req
	proto.Message
}](method string, reply func(*Server, context.Context, PReq) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := PReq(new(Req))
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*Server)
		if interceptor == nil {
			return reply(s, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return reply(s, ctx, req.(PReq))
		})
	}
}

// asMessage is what a method of the generated interface returns for
// answer (in-process callers): a *rawReply is decoded into empty.
func asMessage[M proto.Message](answer any, err error, empty M) (M, error) {
	var none M
	if err != nil {
		return none, err
	}
	r, ok := answer.(*rawReply)
	if !ok {
		return answer.(M), nil
	}
	defer r.data.Free()
	if err := proto.Unmarshal(r.data.Materialize(), empty); err != nil {
		return none, fmt.Errorf("cri: the runtime's answer does not decode: %w", err)
	}
	return empty, nil
}
