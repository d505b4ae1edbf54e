package cri

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// ServerCodec is the codec of crimux's server: protobuf, except that an
// answer passed through (a *rawReply: raw_reply.go) is sent as the
// buffers it holds, not copied or encoded, and a request taken as it came
// (a *rawRequest: raw_request.go) is kept as its buffers. A server registering crimux's
// services (Server.Register) must use it:
// grpc.ForceServerCodecV2(cri.ServerCodec{}).
type ServerCodec struct{}

// Name is protobuf's: clients see the content type they expect.
func (ServerCodec) Name() string { return protocodec.Name }

// Marshal hands a passed-through answer's buffers to gRPC, which frees
// them once sent, and encodes anything else as protobuf.
func (ServerCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawReply); ok {
		if r == nil {
			return nil, fmt.Errorf("cri: nil answer")
		}
		return r.data, nil
	}
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

// Unmarshal keeps a request taken as it came (a *rawRequest:
// raw_request.go) as its buffers, with a reference of its own (gRPC frees
// its own once this returns), and decodes anything else as protobuf.
func (ServerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawRequest); ok {
		data.Ref()
		r.data = data
		return nil
	}
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}
