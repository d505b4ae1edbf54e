package cri

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/registry"
)

// failingConn answers every call with err.
type failingConn struct{ err error }

func (c failingConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return c.err
}

func (c failingConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not used")
}

// codecBackend is a backend whose IDs are rewritten: RawConn is nil.
type codecBackend struct{ rawBackend }

func (codecBackend) RawConn() grpc.ClientConnInterface { return nil }

// fixedFactory makes the backends given by runtime name.
type fixedFactory map[string]registry.Backend

func (f fixedFactory) Key(rt config.Runtime) string { return rt.Name }
func (f fixedFactory) New(_ context.Context, rt config.Runtime, _ *idcodec.Codec) (registry.Backend, error) {
	return f[rt.Name], nil
}

// serverOf is a Server over a primary "containerd" (handler runc) and a
// "vm" runtime (handler vm, IDs prefixed "vm--"), of the given backends.
func serverOf(t *testing.T, containerd, vm registry.Backend) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.Runtimes = []config.Runtime{
		{Name: "containerd", Type: config.TypeContainer, Handlers: []string{"runc"}, Primary: true, Endpoint: "unix:///c.sock"},
		{Name: "vm", Type: config.TypeVM, Handlers: []string{"vm"}, Endpoint: "unix:///v.sock"},
	}
	f := fixedFactory{"containerd": containerd, "vm": vm}
	reg, err := registry.New(context.Background(), cfg, map[string]registry.Factory{config.TypeContainer: f, config.TypeVM: f})
	if err != nil {
		t.Fatal(err)
	}
	return New(reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// recordingConn is a rawConn that keeps the bytes of the request it was
// sent, as gRPC would encode them with the call's codec.
type recordingConn struct {
	rawConn
	sent []byte
}

func (c *recordingConn) Invoke(ctx context.Context, method string, req, reply any, opts ...grpc.CallOption) error {
	for _, o := range opts {
		if f, ok := o.(grpc.ForceCodecV2CallOption); ok {
			b, err := f.CodecV2.Marshal(req)
			if err != nil {
				return err
			}
			c.sent = b.Materialize()
			b.Free()
		}
	}
	return c.rawConn.Invoke(ctx, method, req, reply, opts...)
}

func (c *recordingConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not used")
}

// reversed encodes ContainerStatusRequest{container_id: id, verbose:
// true} with its fields in reverse order: a decode and re-encode would
// reorder them.
func reversed(id string) []byte {
	b := protowire.AppendTag(nil, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendString(b, id)
}

// A status call to the primary passes through both ways: the runtime
// receives the client's request as it was sent, the client the runtime's
// answer as it was sent (non-canonical encodings survive, which a decode
// and re-encode would reorder), and both decode as the same messages.
func TestStatusPassesThrough(t *testing.T) {
	var st []byte // ContainerStatus{state: RUNNING, id: "c1"}, fields in reverse order
	st = protowire.AppendTag(st, 3, protowire.VarintType)
	st = protowire.AppendVarint(st, uint64(runtimeapi.ContainerState_CONTAINER_RUNNING))
	st = protowire.AppendTag(st, 1, protowire.BytesType)
	st = protowire.AppendString(st, "c1")
	answer := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), st)
	conn := &recordingConn{rawConn: rawConn{answer: answer}}
	s := serverOf(t, rawConnBackend{conn}, codecBackend{})
	req := reversed("c1")

	got, err := containerStatus.reply(s, context.Background(), &rawRequest{data: mem.BufferSlice{mem.SliceBuffer(req)}})
	if err != nil || conn.calls != 1 {
		t.Fatalf("reply = %v, %v after %d calls; want an answer in one call", got, err, conn.calls)
	}
	if !bytes.Equal(conn.sent, req) {
		t.Errorf("the runtime receives %x; want the client's bytes %x", conn.sent, req)
	}
	reply, ok := got.(*rawReply)
	if !ok {
		t.Fatalf("answer is %T, want the runtime's passed through", got)
	}
	sent := onTheWire(t, reply.data)
	if !bytes.Equal(sent, answer) {
		t.Fatalf("client receives %x; want the runtime's bytes %x", sent, answer)
	}
	var back runtimeapi.ContainerStatusResponse
	if err := proto.Unmarshal(sent, &back); err != nil || back.GetStatus().GetId() != "c1" ||
		back.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("client decodes %v, %v", &back, err)
	}

	t.Run("in-process callers get the message", func(t *testing.T) {
		resp, err := s.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "c1", Verbose: true})
		if err != nil || resp.GetStatus().GetId() != "c1" || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("ContainerStatus = %v, %v", resp, err)
		}
	})
	t.Run("errors keep their code", func(t *testing.T) {
		for _, code := range []codes.Code{codes.NotFound, codes.Unavailable} {
			s := serverOf(t, rawConnBackend{failingConn{status.Error(code, "no")}}, codecBackend{})
			_, err := containerStatus.reply(s, context.Background(), &rawRequest{data: mem.BufferSlice{mem.SliceBuffer(req)}})
			if status.Code(err) != code {
				t.Errorf("%s: reply = %v; want %s", code, err, code)
			}
		}
	})
}

// A runtime whose IDs are rewritten is asked with the request decoded.
func TestStatusOfARewritingRuntimeIsDecoded(t *testing.T) {
	vm := &statusRuntime{}
	s := serverOf(t, rawConnBackend{failingConn{status.Error(codes.Internal, "containerd must not be asked")}}, vm)
	got, err := containerStatus.reply(s, context.Background(), &rawRequest{data: mem.BufferSlice{mem.SliceBuffer(reversed("vm--c9"))}})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := got.(*runtimeapi.ContainerStatusResponse)
	if !ok || resp.GetStatus().GetId() != "vm--c9" || vm.req.GetContainerId() != "vm--c9" || !vm.req.GetVerbose() {
		t.Errorf("answer %v (%T), runtime asked %v; want vm--c9, verbose", got, got, vm.req)
	}
}

// statusRuntime answers ContainerStatus with the ID it is asked for.
type statusRuntime struct {
	plainBackend
	runtimeapi.RuntimeServiceClient
	req *runtimeapi.ContainerStatusRequest
}

func (r *statusRuntime) Runtime() runtimeapi.RuntimeServiceClient { return r }
func (r *statusRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	r.req = req
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: req.GetContainerId()}}, nil
}

// A request whose framing does not parse, or whose ID field has another
// type, is refused naming the field, before any runtime is asked.
func TestStatusRequestRefusedNamingTheField(t *testing.T) {
	conn := &rawConn{}
	s := serverOf(t, rawConnBackend{conn}, codecBackend{})
	bad := map[string][]byte{
		"truncated ID":       protowire.AppendTag(nil, 1, protowire.BytesType),
		"ID as a varint":     protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7),
		"verbose as bytes":   protowire.AppendString(protowire.AppendTag(reversed("c1"), 2, protowire.BytesType), "x"),
		"no ID":              protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1),
		"a character not ID": reversed("c1/../x"),
		"a broken tag":       {0xff},
	}
	for name, req := range bad {
		_, err := containerStatus.reply(s, context.Background(), &rawRequest{data: mem.BufferSlice{mem.SliceBuffer(req)}})
		if errdefs.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "container_id") {
			t.Errorf("%s: %v; want InvalidArgument naming container_id", name, err)
		}
	}
	if conn.calls != 0 {
		t.Errorf("the runtime was asked %d times", conn.calls)
	}
}

// rawConnBackend is a raw backend on any connection.
type rawConnBackend struct{ conn grpc.ClientConnInterface }

func (b rawConnBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (b rawConnBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (b rawConnBackend) Close() error                             { return nil }
func (b rawConnBackend) RawConn() grpc.ClientConnInterface        { return b.conn }
