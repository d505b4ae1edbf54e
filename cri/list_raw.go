package cri

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/crimux/crimux/registry"
)

// Lists pass the primary runtime's answer through as the bytes it sent.
//
// The primary's IDs are the IDs clients see (internal/idcodec), so there is
// nothing to rewrite in its answer, and protobuf lets a repeated field be
// written in pieces: the encoding of ListContainersResponse{A} followed by
// that of ListContainersResponse{B} decodes as ListContainersResponse{A+B}.
// crimux therefore takes the primary's answer as the buffers it came in
// (rawCodec: not even a scan of its fields) and sends them on as they are
// (raw_reply.go), followed by the encoding of the other runtimes' items
// (primary first, as on the decoded path). Decoding and re-encoding
// containerd's 200 items was half of crimux's CPU in a list
// (docs/benchmarks.md).
//
// The other runtimes' items follow. A runtime that keeps its items encoded
// (registry.EncodedLister: the VM runtime) answers with their bytes, which
// are appended as they are; the others' items are listed and encoded.
//
// Filters are each runtime's to apply, as on the decoded path. When a
// runtime is unavailable its last unfiltered answer is decoded and
// filtered instead: the answers are kept encoded in listFromAll's cache,
// which serves them on either path.

// rawPrimary is the primary runtime of a list when its answers can be
// passed through; others are the rest of the list's runtimes.
type rawPrimary struct {
	rt     *registry.Runtime
	conn   grpc.ClientConnInterface
	others []*registry.Runtime
}

// splitRaw finds the primary among backends and whether its answers can
// be passed through.
func splitRaw(backends []*registry.Runtime) (rawPrimary, bool) {
	for i, rt := range backends {
		if !rt.Primary {
			continue
		}
		conn := rawConnOf(rt)
		if conn == nil {
			return rawPrimary{}, false
		}
		others := append(append([]*registry.Runtime{}, backends[:i]...), backends[i+1:]...)
		return rawPrimary{rt: rt, conn: conn, others: others}, true
	}
	return rawPrimary{}, false
}

// rawList is one list call passed through.
type rawList[T any] struct {
	method     string // full gRPC method name
	req        proto.Message
	cache      *listCache[T]
	unfiltered bool
	// decode decodes an answer into its items; match is the filter.
	decode func(raw []byte) ([]T, error)
	match  func(T) bool
	// encode encodes items as the list's response.
	encode func([]T) ([]byte, error)
	// others lists the other runtimes (listFromAll).
	others func(context.Context, []*registry.Runtime) ([]T, error)
	// encoded asks a runtime that keeps its items encoded.
	encoded func(context.Context, registry.EncodedLister) ([]byte, error)
}

// run asks the primary and the other runtimes concurrently and returns the
// merged answer's encoding: the caller owns (frees or sends) it.
func (l rawList[T]) run(ctx context.Context, s *Server, p rawPrimary) (mem.BufferSlice, error) {
	tails := make([][]byte, len(p.others))
	errs := make([]error, len(p.others))
	var wg sync.WaitGroup
	for i, rt := range p.others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tails[i], errs[i] = l.other(ctx, s, rt)
		}()
	}
	head, cached, err := l.primary(ctx, s, p.rt, p.conn)
	wg.Wait()
	if err != nil {
		return nil, runtimeErr(p.rt, err)
	}
	for _, err := range errs {
		if err != nil {
			head.Free()
			return nil, err
		}
	}
	if len(cached) > 0 { // head is nil: the primary did not answer
		b, err := l.encode(cached)
		if err != nil {
			return nil, err
		}
		head = mem.BufferSlice{mem.SliceBuffer(b)}
	}
	for _, t := range tails { // each a new slice: nothing else holds it
		if len(t) > 0 {
			head = append(head, mem.SliceBuffer(t))
		}
	}
	return head, nil
}

// primary returns the primary's answer (the caller owns its buffers), or
// its cached items when it is unavailable and an earlier answer is known.
func (l rawList[T]) primary(ctx context.Context, s *Server, rt *registry.Runtime, conn grpc.ClientConnInterface) (mem.BufferSlice, []T, error) {
	var answer rawAnswer
	err := conn.Invoke(ctx, l.method, l.req, &answer, grpc.ForceCodecV2(rawCodec{}))
	if err == nil {
		if l.unfiltered {
			l.cache.putRaw(rt.Name, answer.data, l.decode)
		}
		return answer.data, nil, nil
	}
	items, err := lastKnown(ctx, s, rt, l.cache, l.match, err)
	return nil, items, err
}

// other returns the items of a runtime other than the primary, encoded:
// as the runtime keeps them if it does, listed and encoded otherwise.
func (l rawList[T]) other(ctx context.Context, s *Server, rt *registry.Runtime) ([]byte, error) {
	el, ok := registry.Ability[registry.EncodedLister](rt)
	if !ok || l.encoded == nil {
		items, err := l.others(ctx, []*registry.Runtime{rt})
		if err != nil || len(items) == 0 {
			return nil, err
		}
		return l.encode(items)
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout) // as listFromAll's
	defer cancel()
	b, err := l.encoded(lctx, el)
	if err == nil {
		if l.unfiltered {
			l.cache.putRaw(rt.Name, mem.BufferSlice{mem.SliceBuffer(b)}, l.decode)
		}
		return b, nil
	}
	items, err := lastKnown(ctx, s, rt, l.cache, l.match, err)
	if err != nil || len(items) == 0 {
		return nil, runtimeErr(rt, err)
	}
	return l.encode(items)
}

// keep returns the items that match.
func keep[T any](items []T, match func(T) bool) []T {
	var out []T
	for _, it := range items {
		if match(it) {
			out = append(out, it)
		}
	}
	return out
}

// rawAnswer receives an answer's buffers undecoded (rawCodec): its holder
// owns them (sends them on, or frees them).
type rawAnswer struct{ data mem.BufferSlice }

// rawCodec sends requests taken as they came as they are and encodes
// others as protobuf does; it keeps answers into a rawAnswer as their
// buffers and decodes any other message as protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return protocodec.Name }

// Marshal sends a request taken as it came (a *rawRequest) as its
// buffers, which gRPC frees once sent, and encodes any other.
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawRequest); ok {
		return r.data, nil
	}
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if a, ok := v.(*rawAnswer); ok {
		data.Ref() // gRPC frees its own reference once this returns
		a.data = data
		return nil
	}
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}
