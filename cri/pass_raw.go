package cri

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/crimux/crimux/registry"
)

// Status calls routed to a runtime whose IDs clients see unchanged (the
// primary: registry.RawBackend) pass its answer through as the bytes it
// sent, as lists do (list_raw.go): there is nothing in it to change, and
// decoding containerd's ContainerStatus answer only to encode it again was
// ~8 % of crimux's CPU per call (docs/benchmarks.md). The answer becomes
// the unknown fields of crimux's own, which gRPC sends on as they are; the
// client decodes the same message. The request is still decoded: its ID
// decides the route.

// passRaw asks rt for method with req and sets its answer as out's
// unknown fields. handled is false when rt's answers cannot be passed
// through (its IDs are rewritten): the caller then asks the decoded way.
func passRaw(ctx context.Context, rt *registry.Runtime, method string, req, out proto.Message) (handled bool, err error) {
	rb, ok := rt.Backend.(registry.RawBackend)
	if !ok {
		return false, nil
	}
	conn := rb.RawConn()
	if conn == nil {
		return false, nil
	}
	var answer rawAnswer
	if err := conn.Invoke(ctx, method, req, &answer, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return true, runtimeErr(rt, err)
	}
	out.ProtoReflect().SetUnknown(answer.b)
	return true, nil
}
