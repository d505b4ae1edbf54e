package libvirt

import "google.golang.org/protobuf/proto"

func marshalPB(m proto.Message) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	return proto.Marshal(m)
}

func unmarshalPB(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
