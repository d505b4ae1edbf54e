package cri_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crimuxAnswers are RPCs crimux answers itself, without a runtime.
var crimuxAnswers = map[string]bool{"Version": true}

// askedAs maps RPCs crimux serves by asking runtimes another RPC: the
// Stream* lists merge the runtimes' unary List* answers.
var askedAs = map[string]string{
	"StreamPodSandboxes":      "ListPodSandbox",
	"StreamContainers":        "ListContainers",
	"StreamContainerStats":    "ListContainerStats",
	"StreamPodSandboxStats":   "ListPodSandboxStats",
	"StreamPodSandboxMetrics": "ListPodSandboxMetrics",
	"StreamImages":            "ListImages",
}

// Every RPC of both CRI services is served: called with a small valid
// request against runtimes that implement everything, each answers OK
// (never Unimplemented) and reaches a runtime. The RPCs come from the
// generated service descriptors, so an RPC added to the CRI API is tested
// (and fails here) as soon as cri-api is upgraded.
func TestEveryMethodServed(t *testing.T) {
	for _, desc := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		sd := serviceDescriptor(t, desc.ServiceName)
		for _, m := range desc.Methods {
			t.Run(m.MethodName, func(t *testing.T) {
				h := newHarness(t)
				h.seed()
				md := sd.Methods().ByName(protoreflect.Name(m.MethodName))
				req, reply := newMessage(t, md.Input()), newMessage(t, md.Output())
				fill(req.ProtoReflect())
				err := h.conn.Invoke(ctx(t), "/"+desc.ServiceName+"/"+m.MethodName, req, reply)
				if err != nil {
					t.Fatalf("%s(%v) = %v (%v)", m.MethodName, req, status.Code(err), err)
				}
				checkReached(t, h, m.MethodName)
			})
		}
		for i, s := range desc.Streams {
			t.Run(s.StreamName, func(t *testing.T) {
				h := newHarness(t)
				h.seed()
				h.ctrd.SetEvents(&runtimeapi.ContainerEventResponse{ContainerId: "c1"})
				h.ctrd.AddImages(&runtimeapi.Image{Id: "sha256:a"})
				md := sd.Methods().ByName(protoreflect.Name(s.StreamName))
				req := newMessage(t, md.Input())
				fill(req.ProtoReflect())
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				cs, err := h.conn.NewStream(c, &desc.Streams[i], "/"+desc.ServiceName+"/"+s.StreamName)
				if err != nil {
					t.Fatal(err)
				}
				if err := cs.SendMsg(req); err != nil {
					t.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					t.Fatal(err)
				}
				msgs := 0
				for {
					err := cs.RecvMsg(newMessage(t, md.Output()))
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatalf("%s: %v (%v)", s.StreamName, status.Code(err), err)
					}
					msgs++
					if s.StreamName == "GetContainerEvents" { // never ends by itself
						break
					}
				}
				if msgs == 0 {
					t.Errorf("%s sent nothing; the runtimes have items", s.StreamName)
				}
				checkReached(t, h, s.StreamName)
			})
		}
	}
}

func checkReached(t *testing.T, h *harness, method string) {
	t.Helper()
	if as, ok := askedAs[method]; ok {
		method = as
	}
	reached := len(h.ctrd.Calls(method)) + len(h.vm.Calls(method))
	if crimuxAnswers[method] != (reached == 0) {
		t.Errorf("%s reached the runtimes %d times", method, reached)
	}
}

func serviceDescriptor(t *testing.T, name string) protoreflect.ServiceDescriptor {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return d.(protoreflect.ServiceDescriptor)
}

func newMessage(t *testing.T, md protoreflect.MessageDescriptor) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatalf("message %s: %v", md.FullName(), err)
	}
	return mt.New().Interface()
}

// fill makes an empty request valid: IDs of the seeded containerd pod and
// container, an image, a config with metadata, a checkpoint path.
func fill(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		switch fd.Name() {
		case "pod_sandbox_id":
			m.Set(fd, protoreflect.ValueOfString("p1"))
		case "container_id":
			m.Set(fd, protoreflect.ValueOfString("c1"))
		case "checkpoint_path", "output_path", "location":
			m.Set(fd, protoreflect.ValueOfString("/tmp/checkpoint"))
		case "image":
			if fd.Message() != nil && fd.Message().Name() == "ImageSpec" {
				spec := m.Mutable(fd).Message()
				spec.Set(spec.Descriptor().Fields().ByName("image"), protoreflect.ValueOfString("busybox"))
			}
		case "config":
			cfg := m.Mutable(fd).Message()
			if md := cfg.Descriptor().Fields().ByName("metadata"); md != nil {
				meta := cfg.Mutable(md).Message()
				meta.Set(meta.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString("x"))
			}
		}
	}
}
