package crifields

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field is a field of a message a VM pod's requests carry, with the
// table's decision on it (Decided false: it has none).
type Field struct {
	Desc     protoreflect.FieldDescriptor
	Decision Decision
	Decided  bool
}

// Walk lists the fields the table must decide: every field of the roots'
// messages and, below a Nested field, every field of its message; each
// message once, in the order first reached (breadth first, so the docs
// read from the requests down). A field with no decision is descended
// into too, so that all of a new message's fields are listed at once.
// Below a field decided as a whole (ignored, refused…) nothing is walked:
// the decision covers it.
func (t Table) Walk() []Field {
	var out []Field
	queue, seen := Roots(), map[protoreflect.FullName]bool{}
	for _, r := range queue {
		seen[r.FullName()] = true
	}
	for len(queue) > 0 {
		md := queue[0]
		queue = queue[1:]
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			d, ok := t[fd.FullName()]
			out = append(out, Field{Desc: fd, Decision: d, Decided: ok})
			if sub := messageOf(fd); sub != nil && (!ok || d.Kind == Nested) && !seen[sub.FullName()] {
				seen[sub.FullName()] = true
				queue = append(queue, sub)
			}
		}
	}
	return out
}

// messageOf is the message a field holds (a map's values' message), nil
// for a scalar.
func messageOf(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		return fd.MapValue().Message()
	}
	return fd.Message()
}

// Problems is what is wrong with the table against the CRI descriptors,
// one line each, sorted: a field a VM pod's requests carry with no
// decision (a new CRI release's field, or one removed from the table), a
// decision for no such field (misspelt, or under a field decided as a
// whole), and a decision of the wrong shape. None: the table is complete.
func (t Table) Problems() []string {
	var out []string
	reached := map[protoreflect.FullName]bool{}
	for _, f := range t.Walk() {
		name := f.Desc.FullName()
		reached[name] = true
		if !f.Decided {
			out = append(out, fmt.Sprintf("%s: no decision (%s)", name, describe(f.Desc)))
			continue
		}
		if err := shapeError(f.Desc, f.Decision); err != "" {
			out = append(out, fmt.Sprintf("%s: %s", name, err))
		}
	}
	for name := range t {
		if !reached[name] {
			out = append(out, fmt.Sprintf("%s: decided, but no VM pod request reaches such a field (misspelt, or below a field decided as a whole)", name))
		}
	}
	sort.Strings(out)
	return out
}

// shapeError says what is wrong with decision d of field fd, "" if
// nothing.
func shapeError(fd protoreflect.FieldDescriptor, d Decision) string {
	switch {
	case d.Kind < Honoured || d.Kind > Nested:
		return fmt.Sprintf("kind %d is no decision", d.Kind)
	case d.Kind == Nested && (fd.Message() == nil || fd.IsMap()):
		return "nested, but it holds no message (or a map: decide it as a whole)"
	case d.Kind == Nested && d.How != "":
		return "nested with a reason: say it on its message's fields"
	case d.Kind != Nested && d.How == "":
		return d.Kind.String() + " without saying how or why"
	case d.When != nil && d.Kind != Refused:
		return "a refusal's condition on a decision that refuses nothing"
	case d.When != nil && (fd.Enum() == nil || fd.IsList() || fd.Enum().FullName() != d.When.Enum):
		return fmt.Sprintf("refused when %s, values of %s, which the field does not hold", d.When.Text, d.When.Enum)
	}
	return ""
}

// describe is a field's type, for a report.
func describe(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map of " + valueType(fd.MapValue())
	case fd.IsList():
		return "repeated " + valueType(fd)
	}
	return valueType(fd)
}

func valueType(fd protoreflect.FieldDescriptor) string {
	if m := fd.Message(); m != nil {
		return string(m.FullName())
	}
	if e := fd.Enum(); e != nil {
		return string(e.FullName())
	}
	return fd.Kind().String()
}
