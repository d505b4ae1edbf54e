package cri

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// A status answer of the primary reaches the client as the bytes it sent
// (a non-canonical encoding survives, which a decode and re-encode would
// reorder) and decodes as the same message.
func TestPassRawStatus(t *testing.T) {
	var st []byte // ContainerStatus{state: RUNNING, id: "c1"}, fields in reverse order
	st = protowire.AppendTag(st, 3, protowire.VarintType)
	st = protowire.AppendVarint(st, uint64(runtimeapi.ContainerState_CONTAINER_RUNNING))
	st = protowire.AppendTag(st, 1, protowire.BytesType)
	st = protowire.AppendString(st, "c1")
	answer := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), st)
	ctx := context.Background()
	req := &runtimeapi.ContainerStatusRequest{ContainerId: "c1"}

	conn := &rawConn{answer: answer}
	rt := &registry.Runtime{Name: "containerd", Primary: true, Backend: rawBackend{conn}}
	reply, handled, err := passRaw(ctx, rt, runtimeapi.RuntimeService_ContainerStatus_FullMethodName, req)
	if !handled || err != nil || conn.calls != 1 {
		t.Fatalf("passRaw = %v, %v after %d calls; want handled in one call", handled, err, conn.calls)
	}
	sent := onTheWire(t, reply.data)
	if !bytes.Equal(sent, answer) {
		t.Fatalf("client receives %x; want the runtime's bytes %x", sent, answer)
	}
	var got runtimeapi.ContainerStatusResponse
	if err := proto.Unmarshal(sent, &got); err != nil || got.GetStatus().GetId() != "c1" ||
		got.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("client decodes %v, %v", &got, err)
	}

	t.Run("a runtime whose IDs are rewritten is asked the decoded way", func(t *testing.T) {
		rt := &registry.Runtime{Name: "vm", Backend: codecBackend{}}
		if _, handled, err := passRaw(ctx, rt, runtimeapi.RuntimeService_ContainerStatus_FullMethodName, req); handled || err != nil {
			t.Errorf("passRaw = %v, %v; want not handled", handled, err)
		}
	})
	t.Run("errors keep their code", func(t *testing.T) {
		for _, code := range []codes.Code{codes.NotFound, codes.Unavailable} {
			rt := &registry.Runtime{Name: "containerd", Primary: true, Backend: rawConnBackend{failingConn{status.Error(code, "no")}}}
			_, handled, err := passRaw(ctx, rt, runtimeapi.RuntimeService_ContainerStatus_FullMethodName, req)
			if !handled || status.Code(err) != code {
				t.Errorf("%s: passRaw = %v, %v; want handled, %s", code, handled, err, code)
			}
		}
	})
}

// rawConnBackend is a raw backend on any connection.
type rawConnBackend struct{ conn grpc.ClientConnInterface }

func (b rawConnBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (b rawConnBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (b rawConnBackend) Close() error                             { return nil }
func (b rawConnBackend) RawConn() grpc.ClientConnInterface        { return b.conn }
