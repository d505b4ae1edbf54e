// Package idcodec makes routing by ID stateless. The primary runtime's pod
// and container IDs pass through crimux untouched (crimux is transparent for
// containers); every other runtime's IDs are shown to clients as
// "<runtime>--<id>". Given any ID, the prefix alone names the owning runtime,
// so routing needs no table and survives restarts (criproxy's scheme).
//
// Rewriting is done on the wire messages with protobuf reflection: request
// IDs lose the prefix on the way to the runtime, response IDs gain it on the
// way back. Image IDs are never rewritten (images are shared).
//
// This package is the one place that knows the separator and how prefixed
// IDs are built and parsed (and so which runtime names can be prefixes):
// the registry, the VM API, the runtimes and config validation ask it.
package idcodec

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Sep separates the runtime name from the runtime's own ID.
const Sep = "--"

// Split returns the runtime prefix of id and the rest; ok is false for an
// ID without a prefix.
func Split(id string) (prefix, inner string, ok bool) {
	return strings.Cut(id, Sep)
}

// ValidPrefix reports whether name can prefix IDs: not empty and without
// the separator, which would make Split cut inside the name and route the
// runtime's IDs elsewhere.
func ValidPrefix(name string) bool {
	return name != "" && !strings.Contains(name, Sep)
}

// Codec adds and strips one runtime's prefix. The zero Codec is the
// primary's: its IDs pass through unchanged.
type Codec struct{ prefix string }

// New returns the codec of the runtime named prefix.
func New(prefix string) Codec { return Codec{prefix: prefix + Sep} }

// For returns the codec of a registry entry's ID prefix: "" (the
// primary's) gives the zero Codec, which changes nothing.
func For(prefix string) Codec {
	if prefix == "" {
		return Codec{}
	}
	return New(prefix)
}

// Encode turns a runtime's ID into the ID clients see.
func (c Codec) Encode(id string) string {
	if id == "" || strings.HasPrefix(id, c.prefix) {
		return id
	}
	return c.prefix + id
}

// Decode turns a client's ID into the runtime's own.
func (c Codec) Decode(id string) string { return strings.TrimPrefix(id, c.prefix) }

// idMessages hold a field "id" that is a pod or container ID (and not an
// image ID, which stays as it is).
var idMessages = map[protoreflect.Name]bool{
	"PodSandbox": true, "PodSandboxStatus": true, "Container": true, "ContainerStatus": true,
	"PodSandboxAttributes": true, "ContainerAttributes": true, "PodSandboxFilter": true,
	"ContainerFilter": true, "ContainerStatsFilter": true, "PodSandboxStatsFilter": true,
}

// idFields are pod or container IDs in any message (target_id: the
// container whose namespaces a debug container joins).
var idFields = map[protoreflect.Name]bool{"pod_sandbox_id": true, "container_id": true, "target_id": true}

// idListFields are lists of container IDs (CheckpointPodRequest).
var idListFields = map[protoreflect.Name]bool{"container_ids": true}

// Rewrite applies fn to every pod and container ID inside m, recursively.
func Rewrite(m proto.Message, fn func(string) string) {
	if m == nil {
		return
	}
	rewrite(m.ProtoReflect(), fn)
}

func rewrite(m protoreflect.Message, fn func(string) string) {
	if !m.IsValid() {
		return
	}
	isIDMessage := idMessages[m.Descriptor().Name()]
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			if idFields[fd.Name()] || (isIDMessage && fd.Name() == "id") {
				m.Set(fd, protoreflect.ValueOfString(fn(v.String())))
			}
		case fd.Kind() == protoreflect.StringKind && fd.IsList():
			if idListFields[fd.Name()] {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					l.Set(i, protoreflect.ValueOfString(fn(l.Get(i).String())))
				}
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				rewrite(l.Get(i).Message(), fn)
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					rewrite(mv.Message(), fn)
					return true
				})
			}
		case fd.Kind() == protoreflect.MessageKind:
			rewrite(v.Message(), fn)
		}
		return true
	})
}

// UnaryClientInterceptor rewrites IDs of unary calls to a prefixed runtime.
func (c Codec) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m, ok := req.(proto.Message); ok {
			m = proto.Clone(m)
			Rewrite(m, c.Decode)
			req = m
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if m, ok := reply.(proto.Message); ok && err == nil {
			Rewrite(m, c.Encode)
		}
		return err
	}
}

// StreamClientInterceptor rewrites IDs of streaming calls to a prefixed runtime.
func (c Codec) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &codecStream{ClientStream: s, c: c}, nil
	}
}

type codecStream struct {
	grpc.ClientStream
	c Codec
}

func (s *codecStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		pm = proto.Clone(pm)
		Rewrite(pm, s.c.Decode)
		m = pm
	}
	return s.ClientStream.SendMsg(m)
}

func (s *codecStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if pm, ok := m.(proto.Message); ok && err == nil {
		Rewrite(pm, s.c.Encode)
	}
	return err
}
