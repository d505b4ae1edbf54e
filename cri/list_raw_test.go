package cri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/registry"
)

// rawConn answers every call with fixed bytes, as a server would send
// them, decoded by the caller's message.
type rawConn struct {
	answer []byte
	calls  int
}

func (c *rawConn) Invoke(_ context.Context, _ string, _, reply any, opts ...grpc.CallOption) error {
	c.calls++
	for _, o := range opts {
		if f, ok := o.(grpc.ForceCodecV2CallOption); ok {
			return f.CodecV2.Unmarshal(mem.BufferSlice{mem.SliceBuffer(c.answer)}, reply)
		}
	}
	return proto.Unmarshal(c.answer, reply.(proto.Message))
}

func (c *rawConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not used")
}

type rawBackend struct{ conn *rawConn }

func (b rawBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (b rawBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (b rawBackend) Close() error                             { return nil }
func (b rawBackend) RawConn() grpc.ClientConnInterface        { return b.conn }

// nonCanonical encodes a container with its fields in reverse order:
// valid protobuf that a decode and re-encode would reorder.
func nonCanonical(id string) []byte {
	var c []byte
	c = protowire.AppendTag(c, 4, protowire.VarintType) // state
	c = protowire.AppendVarint(c, uint64(runtimeapi.ContainerState_CONTAINER_RUNNING))
	c = protowire.AppendTag(c, 1, protowire.BytesType) // id
	c = protowire.AppendString(c, id)
	var resp []byte
	resp = protowire.AppendTag(resp, 1, protowire.BytesType) // containers
	return protowire.AppendBytes(resp, c)
}

// The primary's answer reaches the client byte for byte, followed by the
// other runtimes' items.
func TestRawListPassesThePrimaryAnswerThrough(t *testing.T) {
	answer := append(nonCanonical("c1"), nonCanonical("c2")...)
	conn := &rawConn{answer: answer}
	primary := &registry.Runtime{Name: "containerd", Primary: true, Backend: rawBackend{conn}}
	other := &registry.Runtime{Name: "vm"}
	p, ok := splitRaw([]*registry.Runtime{primary, other})
	if !ok || p.rt != primary || len(p.others) != 1 || p.others[0] != other {
		t.Fatalf("splitRaw = %+v, %v; want containerd raw, vm the other", p, ok)
	}
	vmItem := &runtimeapi.Container{Id: "vm--c9", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	data, err := rawList[*runtimeapi.Container]{
		method: runtimeapi.RuntimeService_ListContainers_FullMethodName,
		req:    &runtimeapi.ListContainersRequest{},
		cache:  newListCache[*runtimeapi.Container](), unfiltered: true,
		encode: func(items []*runtimeapi.Container) ([]byte, error) {
			return proto.Marshal(&runtimeapi.ListContainersResponse{Containers: items})
		},
		others: func(context.Context, []*registry.Runtime) ([]*runtimeapi.Container, error) {
			return []*runtimeapi.Container{vmItem}, nil
		},
	}.run(context.Background(), s, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || &data[0].ReadOnlyData()[0] != &answer[0] {
		t.Error("the primary's answer was copied, not passed on in the buffers it came in")
	}
	wire := onTheWire(t, data)
	vmWire, _ := proto.Marshal(&runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{vmItem}})
	if want := append(append([]byte{}, answer...), vmWire...); !bytes.Equal(wire, want) {
		t.Errorf("response on the wire:\n%x\nwant the primary's answer unchanged, then the VM runtime's items:\n%x", wire, want)
	}
	var got runtimeapi.ListContainersResponse
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range got.Containers {
		ids = append(ids, c.Id)
	}
	if len(ids) != 3 || ids[0] != "c1" || ids[1] != "c2" || ids[2] != "vm--c9" {
		t.Errorf("client decodes %v, want [c1 c2 vm--c9]", ids)
	}
	if conn.calls != 1 {
		t.Errorf("primary asked %d times, want 1", conn.calls)
	}
}

// A primary that is not a RawBackend (or whose IDs are rewritten:
// containerd.Backend.RawConn is nil then) is listed decoded.
func TestSplitRawNeedsARawPrimary(t *testing.T) {
	noCodec := &registry.Runtime{Name: "containerd", Primary: true, Backend: rawBackend{&rawConn{}}}
	plain := &registry.Runtime{Name: "containerd", Primary: true, Backend: plainBackend{}}
	other := &registry.Runtime{Name: "vm"}
	if _, ok := splitRaw([]*registry.Runtime{other}); ok {
		t.Error("raw without the primary among the backends")
	}
	if _, ok := splitRaw([]*registry.Runtime{plain, other}); ok {
		t.Error("raw with a primary that is no RawBackend")
	}
	if _, ok := splitRaw([]*registry.Runtime{noCodec, other}); !ok {
		t.Error("not raw with a raw primary")
	}
}

type plainBackend struct{}

func (plainBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (plainBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (plainBackend) Close() error                             { return nil }

// encodedOnly is a runtime that answers lists only encoded, with fixed
// bytes (registry.EncodedLister); asked for a decoded list it would fail.
type encodedOnly struct {
	plainBackend
	answer []byte
}

func (b encodedOnly) EncodedSandboxes(context.Context, *runtimeapi.PodSandboxFilter) ([]byte, error) {
	return b.answer, nil
}

func (b encodedOnly) EncodedContainers(context.Context, *runtimeapi.ContainerFilter) ([]byte, error) {
	return b.answer, nil
}

// A runtime that keeps its items encoded has them appended byte for byte
// after the primary's answer.
func TestRawListAppendsEncodedItems(t *testing.T) {
	answer, vmAnswer := nonCanonical("c1"), append(nonCanonical("vm--c8"), nonCanonical("vm--c9")...)
	primary := &registry.Runtime{Name: "containerd", Primary: true, Backend: rawBackend{&rawConn{answer: answer}}}
	vm := &registry.Runtime{Name: "vm", Backend: encodedOnly{answer: vmAnswer}}
	p, ok := splitRaw([]*registry.Runtime{primary, vm})
	if !ok {
		t.Fatal("not raw")
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cache := newListCache[*runtimeapi.Container]()
	data, err := rawList[*runtimeapi.Container]{
		method: runtimeapi.RuntimeService_ListContainers_FullMethodName,
		req:    &runtimeapi.ListContainersRequest{},
		cache:  cache, unfiltered: true,
		decode: func(raw []byte) ([]*runtimeapi.Container, error) {
			var r runtimeapi.ListContainersResponse
			err := proto.Unmarshal(raw, &r)
			return r.Containers, err
		},
		others: func(context.Context, []*registry.Runtime) ([]*runtimeapi.Container, error) {
			t.Error("the encoded runtime was listed decoded")
			return nil, nil
		},
		encoded: func(ctx context.Context, el registry.EncodedLister) ([]byte, error) {
			return el.EncodedContainers(ctx, nil)
		},
	}.run(context.Background(), s, p)
	if err != nil {
		t.Fatal(err)
	}
	wire := onTheWire(t, data)
	if want := append(append([]byte{}, answer...), vmAnswer...); !bytes.Equal(wire, want) {
		t.Errorf("response on the wire:\n%x\nwant the primary's answer, then the VM runtime's as it gave it:\n%x", wire, want)
	}
	if items, _, ok := cache.get("vm"); !ok || len(items) != 2 || items[1].Id != "vm--c9" {
		t.Errorf("the VM runtime's answer kept for when it is down: %v, %v", items, ok)
	}
}

// onTheWire is what crimux's server sends for an answer passed through.
func onTheWire(t *testing.T, data mem.BufferSlice) []byte {
	t.Helper()
	sent, err := ServerCodec{}.Marshal(&rawReply{data: data})
	if err != nil {
		t.Fatal(err)
	}
	defer sent.Free()
	return sent.Materialize()
}

// recordingPool is a buffer pool that counts the buffers returned to it.
type recordingPool struct{ put int }

func (p *recordingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *recordingPool) Put(*[]byte)       { p.put++ }

// The cache keeps an answer's buffers with a reference of its own: gRPC
// frees the reply's once sent, and the buffers go back to their pool only
// when a newer answer replaces them.
func TestListCacheHoldsItsReference(t *testing.T) {
	var answer []byte // large enough to be pooled (gRPC pools no buffer under 1 KiB)
	for i := range 500 {
		answer = append(answer, nonCanonical(fmt.Sprintf("c%d", i))...)
	}
	pool := &recordingPool{}
	data := mem.BufferSlice{mem.NewBuffer(pool.Get(len(answer)), pool)}
	copy(data[0].ReadOnlyData(), answer)
	if _, ok := data[0].(mem.SliceBuffer); ok {
		t.Fatal("the test's buffer is not pooled")
	}
	cache := newListCache[*runtimeapi.Container]()
	decode := func(raw []byte) ([]*runtimeapi.Container, error) {
		var r runtimeapi.ListContainersResponse
		err := proto.Unmarshal(raw, &r)
		return r.Containers, err
	}
	cache.putRaw("containerd", data, decode)
	data.Free() // sent: gRPC's reference
	if pool.put != 0 {
		t.Fatal("the cached buffers went back to their pool while cached")
	}
	if items, _, ok := cache.get("containerd"); !ok || len(items) != 500 || items[499].Id != "c499" {
		t.Fatalf("cache serves %d items, %v; want c0-c499", len(items), ok)
	}
	cache.putRaw("containerd", mem.BufferSlice{mem.SliceBuffer(nonCanonical("c3"))}, decode)
	if pool.put != 1 {
		t.Errorf("buffers returned to the pool after a newer answer: %d, want 1", pool.put)
	}
}
