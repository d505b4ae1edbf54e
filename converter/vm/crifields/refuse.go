package crifields

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/crimux/crimux/internal/errdefs"
)

// Refuse checks a VM pod's request (a RunPodSandboxRequest,
// CreateContainerRequest, UpdateContainerResourcesRequest or
// UpdatePodSandboxResourcesRequest) against the VM runtime's table: the
// first field it sets that the table refuses, in the order the proto
// declares them, is InvalidArgument naming the field by its path in the
// request ("config.linux.security_context.privileged") with the table's
// reason. It reads the request only, so a handler calls it before it
// makes anything.
func Refuse(req proto.Message) error { return decisions.Refuse(req) }

// Refuse is the package's Refuse against table t.
func (t Table) Refuse(req proto.Message) error {
	return t.refuse(req.ProtoReflect(), "")
}

// refuse walks the fields m sets. A field without a decision is let
// through: TestEveryFieldDecided keeps the table whole for the CRI
// module crimux is built with, and a newer kubelet's fields, unknown to
// that module, never reach here as fields.
func (t Table) refuse(m protoreflect.Message, path string) error {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		if err := t.refuseField(fd, m.Get(fd), join(path, string(fd.Name()))); err != nil {
			return err
		}
	}
	return nil
}

func (t Table) refuseField(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	d := t[fd.FullName()]
	switch d.Kind {
	case Refused:
		if d.When != nil && !d.When.Matches(v) {
			return nil
		}
		if fd.Enum() != nil && !fd.IsList() {
			return errdefs.Invalid(path, "%s is refused for a VM pod: %s", enumName(fd.Enum(), v.Enum()), d.How)
		}
		return errdefs.Invalid(path, "refused for a VM pod: %s", d.How)
	case Nested:
		if !fd.IsList() {
			return t.refuse(v.Message(), path)
		}
		list := v.List()
		for i := 0; i < list.Len(); i++ {
			if err := t.refuse(list.Get(i).Message(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
