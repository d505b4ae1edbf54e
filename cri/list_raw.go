package cri

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/registry"
)

// Lists pass the primary runtime's answer through as the bytes it sent.
//
// The primary's IDs are the IDs clients see (internal/idcodec), so there is
// nothing to rewrite in its answer, and protobuf lets a repeated field be
// written in pieces: the encoding of ListContainersResponse{A} followed by
// that of ListContainersResponse{B} decodes as ListContainersResponse{A+B}.
// crimux therefore takes the primary's answer as bytes (rawCodec: not even
// a scan of its fields) and sends it on as the unknown fields of its own
// response, followed by the encoding of the other runtimes' items (primary
// first, as on the decoded path). Decoding and re-encoding containerd's
// 200 items was half of crimux's CPU in a list (docs/benchmarks.md).
//
// Filters are the primary's to apply, as on the decoded path. When the
// primary is unavailable its last unfiltered answer is decoded and
// filtered instead, as listFromAll does with its cache.

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
		rb, ok := rt.Backend.(registry.RawBackend)
		if !ok {
			return rawPrimary{}, false
		}
		conn := rb.RawConn()
		if conn == nil {
			return rawPrimary{}, false
		}
		others := append(append([]*registry.Runtime{}, backends[:i]...), backends[i+1:]...)
		return rawPrimary{rt: rt, conn: conn, others: others}, true
	}
	return rawPrimary{}, false
}

// rawCache keeps the primary's last unfiltered answer.
type rawCache struct {
	mu  sync.Mutex
	raw []byte
	at  time.Time
	ok  bool
}

func (c *rawCache) put(raw []byte) {
	c.mu.Lock()
	c.raw, c.at, c.ok = raw, time.Now(), true
	c.mu.Unlock()
}

func (c *rawCache) get() ([]byte, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw, c.at, c.ok
}

// rawList is one list call passed through.
type rawList[T any] struct {
	method     string // full gRPC method name
	req        proto.Message
	cache      *rawCache
	unfiltered bool
	// cached decodes a cached answer into its items that match the filter.
	cached func(raw []byte) ([]T, error)
	// encode encodes items as the list's response.
	encode func([]T) ([]byte, error)
	// others lists the other runtimes (listFromAll).
	others func(context.Context, []*registry.Runtime) ([]T, error)
}

// run asks the primary and the other runtimes concurrently and sets the
// merged answer as out's unknown fields.
func (l rawList[T]) run(ctx context.Context, s *Server, p rawPrimary, out protoreflect.Message) error {
	var (
		others []T
		othErr error
		wg     sync.WaitGroup
	)
	if len(p.others) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			others, othErr = l.others(ctx, p.others)
		}()
	}
	raw, cached, err := l.primary(ctx, s, p.rt, p.conn)
	wg.Wait()
	if err != nil {
		return runtimeErr(p.rt, err)
	}
	if othErr != nil {
		return othErr
	}
	if items := append(cached, others...); len(items) > 0 {
		tail, err := l.encode(items)
		if err != nil {
			return err
		}
		raw = append(raw[:len(raw):len(raw)], tail...) // never into the cached answer
	}
	out.SetUnknown(raw)
	return nil
}

// primary returns the primary's answer, or its cached items when it is
// unavailable and an earlier answer is known.
func (l rawList[T]) primary(ctx context.Context, s *Server, rt *registry.Runtime, conn grpc.ClientConnInterface) ([]byte, []T, error) {
	var answer rawAnswer
	err := conn.Invoke(ctx, l.method, l.req, &answer, grpc.ForceCodecV2(rawCodec{}))
	if err == nil {
		raw := answer.b
		if l.unfiltered {
			l.cache.put(raw)
		}
		return raw, nil, nil
	}
	old, at, ok := l.cache.get()
	if !ok || !(isUnavailable(err) || (errdefs.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil)) {
		return nil, nil, err
	}
	s.logger(ctx).Warn("runtime unavailable: serving its last known items",
		"runtime", rt.Name, "since", at.Format(time.RFC3339), "err", err)
	items, derr := l.cached(old)
	if derr != nil {
		return nil, nil, err
	}
	return nil, items, nil
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

// rawAnswer receives an answer's bytes undecoded (rawCodec).
type rawAnswer struct{ b []byte }

// rawCodec encodes requests as protobuf does and keeps answers into a
// rawAnswer as their bytes; any other message is decoded as protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return protocodec.Name }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if a, ok := v.(*rawAnswer); ok {
		a.b = data.Materialize()
		return nil
	}
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}
