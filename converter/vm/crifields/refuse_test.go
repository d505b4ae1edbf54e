package crifields

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

// chain is the fields from a root to a field, through nested ones.
type chain []protoreflect.FieldDescriptor

// chainsTo lists, for every refused field, each way down to it from each
// root through nested fields.
func chainsTo(tab Table) map[protoreflect.FullName][]chain {
	out := map[protoreflect.FullName][]chain{}
	var walk func(md protoreflect.MessageDescriptor, prefix chain)
	walk = func(md protoreflect.MessageDescriptor, prefix chain) {
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			here := append(append(chain{}, prefix...), fd)
			switch tab[fd.FullName()].Kind {
			case Refused:
				out[fd.FullName()] = append(out[fd.FullName()], here)
			case Nested:
				walk(fd.Message(), here)
			}
		}
	}
	for _, r := range Roots() {
		walk(r, nil)
	}
	return out
}

// requestSetting is a request of the chain's root with only the chain's
// last field set, to v(field) (nil: a refused value), and the field's path.
func requestSetting(t *testing.T, c chain, v func(protoreflect.FieldDescriptor) protoreflect.Value) (proto.Message, string) {
	t.Helper()
	m := dynamicpb.NewMessage(c[0].ContainingMessage())
	msg, path := protoreflect.Message(m), ""
	for _, fd := range c[:len(c)-1] {
		path = join(path, string(fd.Name()))
		if fd.IsList() {
			msg = msg.Mutable(fd).List().AppendMutable().Message()
			path += "[0]"
			continue
		}
		msg = msg.Mutable(fd).Message()
	}
	leaf := c[len(c)-1]
	setValue(t, msg, leaf, v)
	return m, join(path, string(leaf.Name()))
}

// setValue sets fd of m: to v(fd) if given, else to a value that makes
// it set (one element for a list or a map, an empty message).
func setValue(t *testing.T, m protoreflect.Message, fd protoreflect.FieldDescriptor, v func(protoreflect.FieldDescriptor) protoreflect.Value) {
	t.Helper()
	switch {
	case v != nil:
		m.Set(fd, v(fd))
	case fd.IsMap():
		m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
	case fd.IsList() && fd.Message() != nil:
		m.Mutable(fd).List().AppendMutable()
	case fd.IsList():
		m.Mutable(fd).List().Append(scalar(t, fd))
	case fd.Message() != nil:
		m.Mutable(fd)
	default:
		m.Set(fd, scalar(t, fd))
	}
}

func scalar(t *testing.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(1)
	}
	t.Fatalf("%s: no test value for a %s", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

// enumValues are fd's values that its refusal refuses (or accepts).
func enumValues(fd protoreflect.FieldDescriptor, c *Condition, refusedOnes bool) []protoreflect.EnumNumber {
	var out []protoreflect.EnumNumber
	vals := fd.Enum().Values()
	for i := 0; i < vals.Len(); i++ {
		n := vals.Get(i).Number()
		if c.Matches(protoreflect.ValueOfEnum(n)) == refusedOnes {
			out = append(out, n)
		}
	}
	return out
}

// TestRefuseEveryRefusedField: every field the table refuses, set alone
// in every request that carries it, is InvalidArgument naming its path
// with the table's reason; each value a conditional refusal accepts
// passes.
func TestRefuseEveryRefusedField(t *testing.T) {
	tab := Decisions()
	chains := chainsTo(tab)
	for name, d := range tab {
		if d.Kind == Refused && len(chains[name]) == 0 {
			t.Errorf("%s is refused but no request reaches it through nested fields", name)
		}
	}
	for name, cs := range chains {
		d := tab[name]
		for _, c := range cs {
			leaf := c[len(c)-1]
			refusedValues := []func(protoreflect.FieldDescriptor) protoreflect.Value{nil}
			if d.When != nil {
				refusedValues = nil
				for _, n := range enumValues(leaf, d.When, true) {
					refusedValues = append(refusedValues, enumOf(n))
				}
				for _, n := range enumValues(leaf, d.When, false) {
					req, path := requestSetting(t, c, enumOf(n))
					if err := tab.Refuse(req); err != nil {
						t.Errorf("%s = %s refused: %v", path, enumName(leaf.Enum(), n), err)
					}
				}
			}
			for _, v := range refusedValues {
				req, path := requestSetting(t, c, v)
				err := tab.Refuse(req)
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), d.How) {
					t.Errorf("%s (%s): got %v, want InvalidArgument naming it with the table's reason", path, c[0].ContainingMessage().Name(), err)
				}
			}
		}
	}
}

func enumOf(n protoreflect.EnumNumber) func(protoreflect.FieldDescriptor) protoreflect.Value {
	return func(protoreflect.FieldDescriptor) protoreflect.Value { return protoreflect.ValueOfEnum(n) }
}

// TestRefuseAcceptsKubeletPods: what kubelet sends for an ordinary pod
// (a Restricted one, with a volume, on a node with huge pages, the
// static CPU manager and swap control) passes, at create and at update.
func TestRefuseAcceptsKubeletPods(t *testing.T) {
	pod := kubeletPod()
	ctr := kubeletContainer()
	for _, req := range []proto.Message{
		&runtimeapi.RunPodSandboxRequest{Config: pod, RuntimeHandler: "vm"},
		&runtimeapi.CreateContainerRequest{PodSandboxId: "vm--1", Config: ctr, SandboxConfig: pod},
		&runtimeapi.UpdateContainerResourcesRequest{ContainerId: "vm--2", Linux: ctr.Linux.Resources,
			Annotations: map[string]string{"a": "b"}},
		&runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: "vm--1", Overhead: pod.Linux.Overhead, Resources: pod.Linux.Resources},
	} {
		if err := Refuse(req); err != nil {
			t.Errorf("%T: %v", req, err)
		}
	}
}

// TestRefuseNamesTheElement: a refusal in a list names the element, and
// the first refused field (in the proto's order) is the one reported.
func TestRefuseNamesTheElement(t *testing.T) {
	ctr := kubeletContainer()
	ctr.Mounts[1].Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	ctr.Linux.SecurityContext.Privileged = true
	err := Refuse(&runtimeapi.CreateContainerRequest{Config: ctr})
	want := "config.mounts[1].propagation: PROPAGATION_BIDIRECTIONAL is refused for a VM pod: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q…", err, want)
	}
	ctr.Mounts[1].Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	err = Refuse(&runtimeapi.CreateContainerRequest{Config: ctr})
	if want := "config.linux.security_context.privileged: refused for a VM pod: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q…", err, want)
	}
}

// TestRefuseOnlyWhatTheTableRefuses: the check follows the table it is
// given, so a decision changed in the table is a behaviour changed.
func TestRefuseOnlyWhatTheTableRefuses(t *testing.T) {
	req := &runtimeapi.CreateContainerRequest{Config: &runtimeapi.ContainerConfig{Command: []string{"/bin/sh"}}}
	if err := Refuse(req); err == nil {
		t.Fatal("command accepted")
	}
	tab := Decisions()
	tab["runtime.v1.ContainerConfig.command"] = ignored("a test's")
	if err := tab.Refuse(req); err != nil {
		t.Fatalf("command refused by a table that ignores it: %v", err)
	}
	tab["runtime.v1.ContainerConfig.tty"] = refused("a test's")
	req.Config.Command, req.Config.Tty = nil, true
	if err := tab.Refuse(req); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("config.tty: refused for a VM pod: %s", "a test's")) {
		t.Fatalf("tty refused by the table, got %v", err)
	}
}
