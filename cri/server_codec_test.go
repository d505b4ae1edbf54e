package cri

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A passed-through answer is sent as its own bytes, without a copy; any
// other message as protobuf encodes it.
func TestServerCodec(t *testing.T) {
	answer, err := proto.Marshal(&runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c1"}, {Id: "c2"}}})
	if err != nil {
		t.Fatal(err)
	}
	passed := &runtimeapi.ListContainersResponse{}
	passed.ProtoReflect().SetUnknown(answer)
	mixed := &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "c0"}}}
	mixed.ProtoReflect().SetUnknown(answer)
	for _, tc := range []struct {
		name   string
		m      proto.Message
		shared bool
	}{
		{"unknown fields only: the bytes themselves", passed, true},
		{"known and unknown fields", mixed, false},
		{"known fields only", &runtimeapi.ContainerStatusRequest{ContainerId: "c1"}, false},
		{"empty", &runtimeapi.VersionRequest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ServerCodec{}.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			b := got.Materialize()
			if !bytes.Equal(b, want) {
				t.Fatalf("Marshal = %x, want %x", b, want)
			}
			unknown := tc.m.ProtoReflect().GetUnknown()
			if shared := len(got) == 1 && len(b) > 0 && len(unknown) > 0 && &got[0].ReadOnlyData()[0] == &unknown[0]; shared != tc.shared {
				t.Errorf("sent without a copy: %v, want %v", shared, tc.shared)
			}
			var back runtimeapi.ListContainersResponse
			if _, ok := tc.m.(*runtimeapi.ListContainersResponse); ok {
				if err := (ServerCodec{}).Unmarshal(got, &back); err != nil || len(back.GetContainers()) == 0 {
					t.Errorf("Unmarshal = %v, %v", &back, err)
				}
			}
		})
	}
}
