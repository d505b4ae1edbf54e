// Package crifields is the VM runtime's contract with kubelet, field by
// field: for every field of the CRI messages a VM pod receives
// (RunPodSandbox's, CreateContainer's, UpdateContainerResources' and
// UpdatePodSandboxResources' requests, and every message below them) one
// decision: honoured, mapped to something in or around the guest, ignored
// by design, or refused with InvalidArgument naming the field.
//
// The table is code, and three things follow from it: Refuse, which the
// VM runtime's handlers call first, so a refusal in the table is a
// refusal in behaviour; a test that walks the CRI protobuf descriptors
// and fails on any field without a decision, so a new CRI release cannot
// add a field the VM runtime silently drops; and docs/cri-fields.md,
// generated from the table (go test ./converter/vm/crifields -update).
package crifields

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Kind is what the VM runtime does with a field.
type Kind int

// The decisions. Nested is none: it marks a message-typed field whose own
// fields are decided one by one.
const (
	// Honoured: the field does for a VM what CRI says it does.
	Honoured Kind = iota + 1
	// Mapped: the field becomes something else in or around the guest.
	Mapped
	// Ignored: the field is dropped on purpose (kubelet sends it on every
	// pod, or it has no meaning for a VM), and the decision says why.
	Ignored
	// Refused: a request setting the field (to one of the values of the
	// decision's When) is InvalidArgument naming the field.
	Refused
	// Nested: the field's message is decided field by field.
	Nested
)

func (k Kind) String() string {
	switch k {
	case Honoured:
		return "honoured"
	case Mapped:
		return "mapped"
	case Ignored:
		return "ignored"
	case Refused:
		return "refused"
	case Nested:
		return "nested"
	}
	return "undecided"
}

// Decision is the VM runtime's one decision on a field.
type Decision struct {
	Kind Kind
	// How is, for Honoured, how; for Mapped, to what; for Ignored, why;
	// for Refused, why, and what to use instead (it is the refusal's
	// message). Empty for Nested.
	How string
	// When narrows a refusal to some values of an enum field; nil refuses
	// any value that is set (a true bool, a non-empty string or list, a
	// message that is present).
	When *Condition
}

func honoured(how string) Decision { return Decision{Kind: Honoured, How: how} }
func mapped(to string) Decision    { return Decision{Kind: Mapped, How: to} }
func ignored(why string) Decision  { return Decision{Kind: Ignored, How: why} }
func refused(why string) Decision  { return Decision{Kind: Refused, How: why} }

// nested marks a message-typed field decided field by field.
var nested = Decision{Kind: Nested}

// refusedWhen refuses the values c matches, and accepts the others (the
// reason says what they do).
func refusedWhen(c Condition, why string) Decision {
	return Decision{Kind: Refused, How: why, When: &c}
}

// Condition is the values of an enum field a refusal applies to.
type Condition struct {
	// Enum is the enum the values belong to (the table's test checks it
	// is the field's).
	Enum protoreflect.FullName
	// Text lists the values, for the docs.
	Text    string
	numbers map[protoreflect.EnumNumber]bool
	// negate: the condition holds for every value but numbers.
	negate bool
}

// Matches reports whether v, the value of an enum field, is refused.
func (c Condition) Matches(v protoreflect.Value) bool {
	return c.numbers[v.Enum()] != c.negate
}

// oneOf is the values given.
func oneOf(values ...protoreflect.Enum) Condition {
	c := enumCondition(values)
	c.Text = wordList(enumNames(values), "or")
	return c
}

// noneOf is every value but those given.
func noneOf(values ...protoreflect.Enum) Condition {
	c := enumCondition(values)
	c.negate = true
	c.Text = "other than " + wordList(enumNames(values), "and")
	return c
}

// wordList is "a, b and c" (conj "and") for the docs.
func wordList(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

func enumCondition(values []protoreflect.Enum) Condition {
	c := Condition{numbers: map[protoreflect.EnumNumber]bool{}}
	for _, v := range values {
		c.Enum = v.Descriptor().FullName()
		c.numbers[v.Number()] = true
	}
	return c
}

func enumNames(values []protoreflect.Enum) []string {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = enumName(v.Descriptor(), v.Number())
	}
	return names
}

// enumName is a value's name in its enum, or its number if it has none (a
// value from a newer kubelet).
func enumName(e protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	if v := e.Values().ByNumber(n); v != nil {
		return string(v.Name())
	}
	return strconv.Itoa(int(n))
}
