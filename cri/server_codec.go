package cri

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ServerCodec is the codec of crimux's server: protobuf, except that an
// answer holding nothing but unknown fields — a runtime's answer passed
// through as bytes (list_raw.go, pass_raw.go) — is sent as those bytes,
// not copied into a new buffer first. Its encoding is exactly those bytes
// either way; the copy of a 200-container list (≈ 100 KiB) was the
// largest allocation of a list in crimux, and with it the garbage
// collector's work (docs/benchmarks.md).
type ServerCodec struct{}

// Name is protobuf's: clients see the content type they expect.
func (ServerCodec) Name() string { return protocodec.Name }

// Marshal sends an unknown-only message's bytes as they are (gRPC only
// reads them; nothing in crimux changes a passed-through answer once
// set) and encodes anything else as protobuf.
func (ServerCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(proto.Message); ok {
		if raw, ok := onlyUnknown(m.ProtoReflect()); ok {
			return mem.BufferSlice{mem.SliceBuffer(raw)}, nil
		}
	}
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

// Unmarshal decodes protobuf.
func (ServerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}

// onlyUnknown returns m's unknown bytes when no known field is set.
func onlyUnknown(m protoreflect.Message) ([]byte, bool) {
	raw := m.GetUnknown()
	if len(raw) == 0 {
		return nil, false
	}
	known := false
	m.Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool {
		known = true
		return false
	})
	return raw, !known
}
