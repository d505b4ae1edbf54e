package cri

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// ServerCodec is the codec of crimux's server: protobuf, except that an
// answer passed through (a *rawReply: raw_reply.go) is sent as the
// buffers it holds, not copied or encoded. A server registering crimux's
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

// Unmarshal decodes protobuf.
func (ServerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}
