package cri

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A passed-through answer is sent as the buffers it holds, without a copy;
// any other message as protobuf encodes it.
func TestServerCodec(t *testing.T) {
	answer, err := proto.Marshal(&runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c1"}, {Id: "c2"}}})
	if err != nil {
		t.Fatal(err)
	}
	tail, err := proto.Marshal(&runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "vm--c3"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("passed through: the buffers themselves", func(t *testing.T) {
		reply := &rawReply{data: mem.BufferSlice{mem.SliceBuffer(answer), mem.SliceBuffer(tail)}}
		got, err := ServerCodec{}.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || &got[0].ReadOnlyData()[0] != &answer[0] || &got[1].ReadOnlyData()[0] != &tail[0] {
			t.Errorf("Marshal copied the answer's buffers")
		}
		var back runtimeapi.ListContainersResponse
		if err := (ServerCodec{}).Unmarshal(got, &back); err != nil || len(back.GetContainers()) != 3 || back.Containers[2].Id != "vm--c3" {
			t.Errorf("client decodes %v, %v; want c1, c2, vm--c3", &back, err)
		}
	})
	for _, m := range []proto.Message{
		&runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c0"}}},
		&runtimeapi.ContainerStatusRequest{ContainerId: "c1"},
		&runtimeapi.VersionRequest{},
	} {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ServerCodec{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Errorf("Marshal(%T) = %x, want %x", m, b, want)
		}
	}
	if _, err := (ServerCodec{}).Marshal((*rawReply)(nil)); err == nil {
		t.Error("a nil answer was sent")
	}
}
