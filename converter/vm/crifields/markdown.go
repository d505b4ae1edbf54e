package crifields

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// DocsPath is where the table's page lives, from the module's root.
const DocsPath = "docs/cri-fields.md"

// Counts is how many fields the table gives each decision (Nested fields
// aside: their message's fields are counted), and how many refusals apply
// to some values only.
type Counts struct {
	ByKind      map[Kind]int
	Total       int
	RefusedWhen int
}

// Count counts the decisions of the fields the walk reaches.
func (t Table) Count() Counts {
	c := Counts{ByKind: map[Kind]int{}}
	for _, f := range t.Walk() {
		if !f.Decided || f.Decision.Kind == Nested {
			continue
		}
		c.ByKind[f.Decision.Kind]++
		c.Total++
		if f.Decision.When != nil {
			c.RefusedWhen++
		}
	}
	return c
}

// Summary is the table in one sentence (the README carries it).
func (t Table) Summary() string {
	c := t.Count()
	return fmt.Sprintf("The VM runtime has one decision on each of the %d CRI fields a VM pod's requests carry "+
		"(a field holding a message is decided as a whole or through its own fields): "+
		"%d honoured, %d mapped to something in or around the guest, %d ignored by design and %d refused "+
		"(InvalidArgument naming the field; %d of them only at some values).",
		c.Total, c.ByKind[Honoured], c.ByKind[Mapped], c.ByKind[Ignored], c.ByKind[Refused], c.RefusedWhen)
}

// Markdown is docs/cri-fields.md: the table by message, in the walk's
// order.
func (t Table) Markdown() []byte {
	var b strings.Builder
	b.WriteString(docsHead)
	b.WriteString(t.Summary() + "\n")
	var msg protoreflect.FullName
	for _, f := range t.Walk() {
		if parent := f.Desc.ContainingMessage(); parent.FullName() != msg {
			msg = parent.FullName()
			fmt.Fprintf(&b, "\n## %s\n\n| field | decision | how, or why |\n|---|---|---|\n", parent.Name())
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Desc.Name(), decisionCell(f), cell(f.Decision.How))
	}
	return []byte(b.String())
}

const docsHead = `# The CRI fields of a VM pod

<!-- Generated from converter/vm/crifields by: go test ./converter/vm/crifields -update. Do not edit. -->

What crimux's VM runtime does with each field of the CRI requests a VM
pod receives (RunPodSandbox, CreateContainer, UpdateContainerResources,
UpdatePodSandboxResources), message by message:

- **honoured**: the field does for the VM what CRI says it does;
- **mapped**: it becomes something else in or around the guest, said here;
- **ignored**: it is dropped on purpose, for the reason given (most are
  set by kubelet on every pod, for a container's processes);
- **refused**: the request fails with ` + "`InvalidArgument`" + ` naming the
  field by its path in the request (` + "`config.command`" + `) with the
  reason below, before anything is made. A field kubelet sets on every pod
  is never refused at the value kubelet gives it.

A field holding a message is decided either as a whole or field by field
in its message's own table ("see"). A unit test walks the CRI protobuf
descriptors and fails on any field without a decision, so a new CRI
release cannot add one that a VM pod silently drops.

`

// decisionCell is a field's decision as the docs say it.
func decisionCell(f Field) string {
	d := f.Decision
	switch {
	case !f.Decided:
		return "**undecided**"
	case d.Kind == Nested:
		sub := messageOf(f.Desc).Name()
		return fmt.Sprintf("see [%s](#%s)", sub, strings.ToLower(string(sub)))
	case d.Kind != Refused:
		return d.Kind.String()
	case d.When != nil:
		return "**refused** when " + d.When.Text
	}
	return "**refused** when " + setText(f.Desc)
}

// setText is what makes a field "set" (proto3: not its zero value).
func setText(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsList() || fd.IsMap():
		return "not empty"
	case fd.Kind() == protoreflect.BoolKind:
		return "true"
	}
	return "set"
}

// cell makes text safe in a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
