// Package apiref generates the VM API's reference page, docs/vm-api.md:
// the rpcs, messages, fields and enums from the descriptors compiled into
// proto/vm/v1 (no protoc needed), with the comments of vm.proto, which
// those descriptors do not carry. Its test fails when the page and the
// proto differ (go test ./proto/vm/v1/apiref -update rewrites the page)
// and when a new rpc or field has no comment.
package apiref

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const (
	// DocsPath is the VM API's reference page, from the module's root.
	DocsPath = "docs/vm-api.md"
	// SourcePath is the VM API's .proto, from the module's root.
	SourcePath = "proto/vm/v1/vm.proto"
)

// File is the VM API's file descriptor, compiled from SourcePath.
var File = vmv1.File_vm_v1_vm_proto

const head = `# VM API reference

<!-- Generated from proto/vm/v1/vm.proto by: go test ./proto/vm/v1/apiref -update. Do not edit. -->

The VM API (` + "`crimux.vm.v1`" + `) is crimux's own gRPC service, for what a VM
can do that a container cannot: reboots, power states, snapshots, foreign
resources, templates and live migration. crimux serves it on its socket
beside CRI (` + "`--listen`, `/run/crimux/crimux.sock`" + ` by default,
[node.md](node.md)); kubelet never calls it. Its clients:

- ` + "`crimuxctl`" + ` on the node, over the socket: ` + "`vm`" + ` (list, get, reboot,
  power, snapshot, migrate), ` + "`gc`" + ` and ` + "`template`" + `
  ([vm-pods.md](vm-pods.md#power-state-reboots-and-snapshots),
  [operations.md](operations.md#restart-safety),
  [templates.md](templates.md), [migration.md](migration.md));
- the node agent, inside crimux, which applies the ` + "`crimux.io/`" + `
  annotations of VM pods through it. ` + "`kubectl crimux`" + ` (the kubectl
  plugin) sets those annotations and relays the agents' answers: it
  reaches the VM API through the node agents, never directly
  ([vm-pods.md](vm-pods.md#power-state-reboots-and-snapshots),
  [migration.md](migration.md)).

This page is generated from [` + "`proto/vm/v1/vm.proto`" + `](../proto/vm/v1/vm.proto):
the descriptors compiled into its Go package, and the comments of the
` + "`.proto`" + `. A test fails when this page and the proto differ, or when a
new rpc or field has no comment. Versioning and regeneration are in
[proto/README.md](../proto/README.md).
`

// Markdown is the reference page of fd, with the comments of src (the
// text of its .proto): the file's own comment, each service's rpcs, then
// the messages and the enums, each in the .proto file's order. A
// declaration the descriptors and src do not share is an error.
func Markdown(fd protoreflect.FileDescriptor, src []byte) ([]byte, error) {
	docs, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fd.Path(), err)
	}
	if err := Match(fd, docs); err != nil {
		return nil, err
	}
	p := &page{fd: fd, docs: docs}
	var msgs []protoreflect.MessageDescriptor
	var enums []protoreflect.EnumDescriptor
	for _, d := range Elements(fd) {
		switch d := d.(type) {
		case protoreflect.MessageDescriptor:
			msgs = append(msgs, d)
		case protoreflect.EnumDescriptor:
			enums = append(enums, d)
		}
	}
	// Nested types come in the source's order too, not after their parent.
	slices.SortStableFunc(msgs, func(a, b protoreflect.MessageDescriptor) int { return p.line(a) - p.line(b) })
	slices.SortStableFunc(enums, func(a, b protoreflect.EnumDescriptor) int { return p.line(a) - p.line(b) })
	if err := p.checkAnchors(msgs, enums); err != nil {
		return nil, err
	}
	p.b.WriteString(head)
	if len(docs.File) > 0 {
		p.b.WriteString("\n## Overview\n")
		p.paragraphs(docs.File)
	}
	for i := range fd.Services().Len() {
		p.service(fd.Services().Get(i))
	}
	p.b.WriteString("\n## Messages\n")
	for _, m := range msgs {
		p.message(m)
	}
	p.b.WriteString("\n## Enums\n")
	for _, e := range enums {
		p.enum(e)
	}
	return []byte(p.b.String()), nil
}

// page is the reference page being written.
type page struct {
	fd   protoreflect.FileDescriptor
	docs Docs
	b    strings.Builder
}

func (p *page) line(d protoreflect.Descriptor) int { return p.docs.Decls[d.FullName()].Line }
func (p *page) doc(d protoreflect.Descriptor) []string {
	return p.docs.Decls[d.FullName()].Doc
}

// checkAnchors refuses a page where two headings would share an anchor
// (an rpc named as a message): its links would lead to the wrong one.
func (p *page) checkAnchors(msgs []protoreflect.MessageDescriptor, enums []protoreflect.EnumDescriptor) error {
	seen := map[string]string{}
	add := func(what, heading string) error {
		a := anchor(heading)
		if other, ok := seen[a]; ok {
			return fmt.Errorf("%s and %s share the anchor #%s on the page", other, what, a)
		}
		seen[a] = what
		return nil
	}
	var errs []error
	for _, h := range []string{"VM API reference", "Overview", "Messages", "Enums"} {
		errs = append(errs, add("the heading "+h, h))
	}
	for i := range p.fd.Services().Len() {
		s := p.fd.Services().Get(i)
		errs = append(errs, add("service "+string(s.Name()), "Service "+string(s.Name())))
		for j := range s.Methods().Len() {
			errs = append(errs, add("rpc "+string(s.Methods().Get(j).Name()), string(s.Methods().Get(j).Name())))
		}
	}
	for _, m := range msgs {
		errs = append(errs, add("message "+p.display(m), p.display(m)))
	}
	for _, e := range enums {
		errs = append(errs, add("enum "+p.display(e), p.display(e)))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *page) service(s protoreflect.ServiceDescriptor) {
	fmt.Fprintf(&p.b, "\n## Service `%s`\n", s.Name())
	p.paragraphs(p.doc(s))
	fmt.Fprintf(&p.b, "\n`%s`, %d rpcs:\n\n| rpc | request | response |\n|---|---|---|\n", s.FullName(), s.Methods().Len())
	for i := range s.Methods().Len() {
		m := s.Methods().Get(i)
		fmt.Fprintf(&p.b, "| [`%s`](#%s) | %s | %s |\n", m.Name(), anchor(string(m.Name())),
			p.stream(m.Input(), m.IsStreamingClient()), p.stream(m.Output(), m.IsStreamingServer()))
	}
	for i := range s.Methods().Len() {
		m := s.Methods().Get(i)
		fmt.Fprintf(&p.b, "\n### `%s`\n\n%s, `/%s/%s`: request %s, response %s.\n", m.Name(), callKind(m),
			s.FullName(), m.Name(), p.stream(m.Input(), m.IsStreamingClient()), p.stream(m.Output(), m.IsStreamingServer()))
		p.paragraphs(p.doc(m))
	}
}

// callKind is how an rpc's messages flow.
func callKind(m protoreflect.MethodDescriptor) string {
	switch {
	case m.IsStreamingClient() && m.IsStreamingServer():
		return "Bidirectional streaming"
	case m.IsStreamingServer():
		return "Server streaming"
	case m.IsStreamingClient():
		return "Client streaming"
	}
	return "Unary"
}

func (p *page) stream(m protoreflect.MessageDescriptor, streaming bool) string {
	if streaming {
		return "a stream of " + p.typeRef(m)
	}
	return p.typeRef(m)
}

func (p *page) message(m protoreflect.MessageDescriptor) {
	fmt.Fprintf(&p.b, "\n### `%s`\n", p.display(m))
	p.paragraphs(p.doc(m))
	for i := range m.Oneofs().Len() {
		if o := m.Oneofs().Get(i); !o.IsSynthetic() && len(p.doc(o)) > 0 {
			fmt.Fprintf(&p.b, "\nOneof `%s`: %s\n", o.Name(), escape(oneLine(p.doc(o))))
		}
	}
	if m.Fields().Len() == 0 {
		p.b.WriteString("\nNo fields.\n")
		return
	}
	p.b.WriteString("\n| field | type | number | description |\n|---|---|---|---|\n")
	for i := range m.Fields().Len() {
		f := m.Fields().Get(i)
		fmt.Fprintf(&p.b, "| `%s` | %s | %d | %s |\n", f.Name(), p.fieldType(f), f.Number(), escape(oneLine(p.doc(f))))
	}
}

func (p *page) enum(e protoreflect.EnumDescriptor) {
	fmt.Fprintf(&p.b, "\n### `%s`\n", p.display(e))
	p.paragraphs(p.doc(e))
	p.b.WriteString("\n| value | number | description |\n|---|---|---|\n")
	for i := range e.Values().Len() {
		v := e.Values().Get(i)
		fmt.Fprintf(&p.b, "| `%s` | %d | %s |\n", v.Name(), v.Number(), escape(oneLine(p.doc(v))))
	}
}

// fieldType is a field's type as the page gives it: its label, its
// type (linked when the page has it), and its oneof.
func (p *page) fieldType(f protoreflect.FieldDescriptor) string {
	if f.IsMap() {
		return "map from " + p.kindName(f.MapKey()) + " to " + p.kindName(f.MapValue())
	}
	t := p.kindName(f)
	switch {
	case f.IsList():
		t = "repeated " + t
	case f.HasOptionalKeyword():
		t = "optional " + t
	}
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		t += ", oneof `" + string(o.Name()) + "`"
	}
	return t
}

func (p *page) kindName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return p.typeRef(f.Message())
	case protoreflect.EnumKind:
		return p.typeRef(f.Enum())
	}
	return "`" + f.Kind().String() + "`"
}

// typeRef is a message or enum linked to its section, or its full name
// when another file declares it.
func (p *page) typeRef(d protoreflect.Descriptor) string {
	if d.ParentFile() == nil || d.ParentFile().Path() != p.fd.Path() {
		return "`" + string(d.FullName()) + "`"
	}
	name := p.display(d)
	return fmt.Sprintf("[`%s`](#%s)", name, anchor(name))
}

// display is a type's name within the file's package (Outer.Inner).
func (p *page) display(d protoreflect.Descriptor) string {
	return strings.TrimPrefix(string(d.FullName()), string(p.fd.Package())+".")
}

// paragraphs writes a comment's paragraphs, each joined into one line so
// that no comment line is read as markdown's list or heading.
func (p *page) paragraphs(lines []string) {
	var para []string
	flush := func() {
		if len(para) > 0 {
			p.b.WriteString("\n" + escape(strings.Join(para, " ")) + "\n")
		}
		para = nil
	}
	for _, l := range lines {
		if l == "" {
			flush()
			continue
		}
		para = append(para, strings.TrimSpace(l))
	}
	flush()
}

// oneLine is a comment on one line, for a table's cell.
func oneLine(lines []string) string {
	var parts []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// escape makes comment text literal in markdown: the characters that
// would make HTML (<id>), emphasis, links, code or a table's cell are
// backslashed; an underscore only where it could open or close emphasis
// (not inside a word such as snapshot_name).
func escape(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		switch c {
		case '\\', '*', '<', '>', '[', ']', '`', '|':
			b.WriteRune('\\')
		case '_':
			if i == 0 || i == len(r)-1 || !isWordRune(r[i-1]) || !isWordRune(r[i+1]) {
				b.WriteRune('\\')
			}
		}
		b.WriteRune(c)
	}
	return b.String()
}

func isWordRune(c rune) bool { return unicode.IsLetter(c) || unicode.IsDigit(c) }

// anchor is the id GitHub gives a heading: lower case, spaces as
// hyphens, other punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(heading) {
		switch {
		case c == ' ':
			b.WriteRune('-')
		case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c):
			b.WriteRune(c)
		}
	}
	return b.String()
}
