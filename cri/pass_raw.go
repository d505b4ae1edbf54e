package cri

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/crimux/crimux/registry"
)

// Status calls routed to a runtime whose IDs clients see unchanged (the
// primary: registry.RawBackend) pass its answer through as the buffers it
// came in (raw_reply.go), as lists do (list_raw.go): there is nothing in
// it to change, and decoding containerd's ContainerStatus answer only to
// encode it again was ~8 % of crimux's CPU per call (docs/benchmarks.md).
// The client decodes the same message. The request is still decoded: its
// ID decides the route.

// passRaw asks rt for method with req and returns its answer as a
// *rawReply. handled is false when rt's answers cannot be passed through
// (its IDs are rewritten): the caller then asks the decoded way.
func passRaw(ctx context.Context, rt *registry.Runtime, method string, req proto.Message) (reply *rawReply, handled bool, err error) {
	rb, ok := rt.Backend.(registry.RawBackend)
	if !ok {
		return nil, false, nil
	}
	conn := rb.RawConn()
	if conn == nil {
		return nil, false, nil
	}
	var answer rawAnswer
	if err := conn.Invoke(ctx, method, req, &answer, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return nil, true, runtimeErr(rt, err)
	}
	return &rawReply{data: answer.data}, true, nil
}
