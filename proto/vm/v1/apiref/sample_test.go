package apiref

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// sampleFile is the descriptor protoc would compile sample into.
func sampleFile(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n),
			Type: typ.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	msg, str := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, descriptorpb.FieldDescriptorProto_TYPE_STRING
	byID, inner := field("by_id", 1, str, ""), field("inner", 2, msg, ".demo.v1.GetRequest.Inner")
	byID.OneofIndex, inner.OneofIndex = proto.Int32(0), proto.Int32(0)
	labels := field("labels", 3, msg, ".demo.v1.GetRequest.LabelsEntry")
	n := field("n", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, "")
	labels.Label, n.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("demo/v1/demo.proto"), Package: proto.String("demo.v1"), Syntax: proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Svc"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Get"), InputType: proto.String(".demo.v1.GetRequest"), OutputType: proto.String(".demo.v1.GetResponse")},
			{Name: proto.String("Watch"), InputType: proto.String(".demo.v1.GetRequest"), OutputType: proto.String(".demo.v1.GetResponse"), ServerStreaming: proto.Bool(true)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("GetRequest"), Field: []*descriptorpb.FieldDescriptorProto{byID, inner, labels},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("which")}},
				NestedType: []*descriptorpb.DescriptorProto{
					{Name: proto.String("Inner"), Field: []*descriptorpb.FieldDescriptorProto{n}},
					{Name: proto.String("LabelsEntry"), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
						Field: []*descriptorpb.FieldDescriptorProto{field("key", 1, str, ""), field("value", 2, msg, ".demo.v1.GetRequest.Inner")}},
				}},
			{Name: proto.String("GetResponse")},
		},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("COLOR_UNSPECIFIED"), Number: proto.Int32(0)}, {Name: proto.String("COLOR_RED"), Number: proto.Int32(1)},
		}}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestMarkdownOfSample: the parser finds every declaration of sample's
// descriptors, and the page gives streaming, oneofs, maps, nested types
// and trailing comments as they are.
func TestMarkdownOfSample(t *testing.T) {
	page, err := Markdown(sampleFile(t), []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n## Overview\n\nThe file's comment.\n\nIts second paragraph.\n",
		"Server streaming, `/demo.v1.Svc/Watch`: request [`GetRequest`](#getrequest), response a stream of [`GetResponse`](#getresponse).\n",
		"| `by_id` | `string`, oneof `which` | 1 | by_id has a \"// not a comment\" default. |\n",
		"| `labels` | map from `string` to [`GetRequest.Inner`](#getrequestinner) | 3 | labels, trailing. |\n",
		"\n### `GetRequest.Inner`\n\nInner is nested.\n",
		"| `n` | repeated `int64` | 1 |  |\n",
		"\n### `GetResponse`\n\nNo fields.\n",
		"| `COLOR_UNSPECIFIED` | 0 | Zero. |\n",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(string(page), "LabelsEntry") {
		t.Error("the page gives the map's entry message, which the source does not declare")
	}
}
