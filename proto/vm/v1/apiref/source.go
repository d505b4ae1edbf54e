package apiref

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Docs is what a .proto file's comments say. The descriptors compiled
// into the Go code carry no comments, so they are read from the source.
type Docs struct {
	// File is the comment above the file's first statement (the file's
	// own), a "" line between paragraphs.
	File []string
	// Decls are the declarations found, by the full name protoreflect
	// gives what each declares (an enum value's is its enum's sibling).
	Decls map[protoreflect.FullName]Decl
}

// Decl is one declaration of the source: an rpc, message, field, oneof,
// enum or enum value.
type Decl struct {
	// Line is where it starts, from 1.
	Line int
	// Doc is its comment: the // lines right above it (a blank line
	// detaches them, as for protoc), then a // comment ending its line;
	// a "" line between paragraphs.
	Doc []string
}

var (
	packageLine = regexp.MustCompile(`^package\s+([\w.]+)\s*;`)
	blockLine   = regexp.MustCompile(`^(message|enum|service|oneof)\s+(\w+)\s*\{`)
	rpcLine     = regexp.MustCompile(`^rpc\s+(\w+)\s*\(`)
	fieldLine   = regexp.MustCompile(`^(?:(?:repeated|optional|required)\s+)?(?:map\s*<[^>]*>|[\w.]+)\s+(\w+)\s*=\s*\d`)
	valueLine   = regexp.MustCompile(`^(\w+)\s*=\s*-?\d`)
	// Statements that declare nothing documented; checked first, so that
	// "option x = 1;" is not read as a field.
	otherLine = regexp.MustCompile(`^(syntax|edition|import|option|reserved|extensions)\b`)
)

// scope is one open brace of the source.
type scope struct {
	// kind is "message", "enum", "service" or "oneof"; "" for a brace
	// that declares nothing documented (an rpc's options, extend, an
	// option's value).
	kind string
	// name is the message's, enum's or service's full name; a oneof's is
	// its message's, whose fields it declares.
	name protoreflect.FullName
}

// parser reads a .proto file line by line. It knows one declaration per
// line, as protoc's style guide writes them; what it does not recognise
// it skips, and Match catches any declaration it missed.
type parser struct {
	pkg      protoreflect.FullName
	stack    []scope
	pending  []string // comment lines since the last code or blank line
	seenCode bool
	docs     Docs
}

// Parse reads the comments of a .proto file's rpcs, messages, fields,
// oneofs, enums and enum values. Only // comments are read: a /* comment
// is an error, so that none is silently lost.
func Parse(src []byte) (Docs, error) {
	p := parser{docs: Docs{Decls: map[protoreflect.FullName]Decl{}}}
	for i, text := range strings.Split(string(src), "\n") {
		if err := p.line(i+1, text); err != nil {
			return Docs{}, fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	if len(p.stack) > 0 {
		return Docs{}, fmt.Errorf("%d { left open at the end", len(p.stack))
	}
	p.docs.File = trimBreaks(p.docs.File)
	return p.docs, nil
}

func (p *parser) line(n int, text string) error {
	code, comment, hasComment, err := splitComment(text)
	if err != nil {
		return err
	}
	code = strings.TrimSpace(code)
	switch {
	case code == "" && !hasComment:
		// A blank line detaches the comment above it.
		p.pending = nil
		if !p.seenCode {
			p.docs.File = append(p.docs.File, "")
		}
	case code == "":
		p.pending = append(p.pending, comment)
		if !p.seenCode {
			p.docs.File = append(p.docs.File, comment)
		}
	default:
		p.seenCode = true
		doc := p.pending
		p.pending = nil
		if hasComment {
			doc = append(doc, comment)
		}
		return p.code(n, code, doc)
	}
	return nil
}

// code reads one line of code: what it declares, then its braces.
func (p *parser) code(n int, code string, doc []string) error {
	top := p.top()
	var opened *scope
	var err error
	if m := packageLine.FindStringSubmatch(code); m != nil && len(p.stack) == 0 {
		p.pkg = protoreflect.FullName(m[1])
	} else if otherLine.MatchString(code) {
		// Declares nothing documented.
	} else if m := blockLine.FindStringSubmatch(code); m != nil {
		opened, err = p.block(n, m[1], m[2], doc)
	} else if m := rpcLine.FindStringSubmatch(code); m != nil && top.kind == "service" {
		err = p.record(n, top.name.Append(protoreflect.Name(m[1])), doc)
	} else if m := fieldLine.FindStringSubmatch(code); m != nil && (top.kind == "message" || top.kind == "oneof") {
		err = p.record(n, top.name.Append(protoreflect.Name(m[1])), doc)
	} else if m := valueLine.FindStringSubmatch(code); m != nil && top.kind == "enum" {
		err = p.record(n, top.name.Parent().Append(protoreflect.Name(m[1])), doc)
	}
	if err != nil {
		return err
	}
	for _, c := range braces(code) {
		if c == '{' {
			s := scope{}
			if opened != nil {
				s, opened = *opened, nil
			}
			p.stack = append(p.stack, s)
			continue
		}
		if len(p.stack) == 0 {
			return fmt.Errorf("} closes nothing")
		}
		p.stack = p.stack[:len(p.stack)-1]
	}
	return nil
}

// block records a message, enum, service or oneof and returns the scope
// its brace opens; nil where such a block cannot be (its brace then
// declares nothing documented).
func (p *parser) block(n int, kind, name string, doc []string) (*scope, error) {
	top := p.top()
	switch {
	case kind == "oneof" && top.kind == "message":
		return &scope{kind: kind, name: top.name}, p.record(n, top.name.Append(protoreflect.Name(name)), doc)
	case kind == "oneof", kind == "service" && len(p.stack) > 0:
		return nil, nil
	case top.kind != "message" && len(p.stack) > 0:
		return nil, nil
	}
	parent := p.pkg
	if top.kind == "message" {
		parent = top.name
	}
	full := parent.Append(protoreflect.Name(name))
	return &scope{kind: kind, name: full}, p.record(n, full, doc)
}

func (p *parser) record(n int, name protoreflect.FullName, doc []string) error {
	if d, ok := p.docs.Decls[name]; ok {
		return fmt.Errorf("%s declared again (first on line %d)", name, d.Line)
	}
	p.docs.Decls[name] = Decl{Line: n, Doc: trimBreaks(doc)}
	return nil
}

// top is the innermost open scope; the zero scope at the file's level.
func (p *parser) top() scope {
	if len(p.stack) == 0 {
		return scope{}
	}
	return p.stack[len(p.stack)-1]
}

// splitComment splits a line into its code and its // comment (without
// the slashes and the one space after them), skipping string literals.
// A /* comment is an error.
func splitComment(text string) (code, comment string, hasComment bool, err error) {
	code = text
	outsideStrings(text, func(i int) bool {
		switch {
		case strings.HasPrefix(text[i:], "//"):
			comment = strings.TrimRight(strings.TrimPrefix(text[i+2:], " "), " \t\r")
			code, hasComment = text[:i], true
			return false
		case strings.HasPrefix(text[i:], "/*"):
			code, err = "", fmt.Errorf("a /* comment: only // comments are read")
			return false
		}
		return true
	})
	return code, comment, hasComment, err
}

// braces are the { and } of a line's code outside string literals, in
// order.
func braces(code string) []byte {
	var out []byte
	outsideStrings(code, func(i int) bool {
		if code[i] == '{' || code[i] == '}' {
			out = append(out, code[i])
		}
		return true
	})
	return out
}

// outsideStrings calls visit with the index of each byte of text that is
// not in a string literal ('...' or "...", backslash escapes skipped), in
// order, until visit returns false.
func outsideStrings(text string, visit func(i int) bool) {
	var quote byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		default:
			if !visit(i) {
				return
			}
		}
	}
}

// trimBreaks drops the paragraph breaks ("" lines) at both ends of
// lines and runs of them within.
func trimBreaks(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l == "" && (len(out) == 0 || out[len(out)-1] == "") {
			continue
		}
		out = append(out, l)
	}
	if len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// Elements are the documented things of fd in the descriptors' order:
// each service and its rpcs; each message (nested ones after it, map
// entries aside), its oneofs (proto3 optional's aside), its fields and
// its enums; each enum and its values.
func Elements(fd protoreflect.FileDescriptor) []protoreflect.Descriptor {
	var out []protoreflect.Descriptor
	for i := range fd.Services().Len() {
		s := fd.Services().Get(i)
		out = append(out, s)
		for j := range s.Methods().Len() {
			out = append(out, s.Methods().Get(j))
		}
	}
	out = appendMessages(out, fd.Messages())
	return appendEnums(out, fd.Enums())
}

func appendMessages(out []protoreflect.Descriptor, ms protoreflect.MessageDescriptors) []protoreflect.Descriptor {
	for i := range ms.Len() {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue
		}
		out = append(out, m)
		for j := range m.Oneofs().Len() {
			if o := m.Oneofs().Get(j); !o.IsSynthetic() {
				out = append(out, o)
			}
		}
		for j := range m.Fields().Len() {
			out = append(out, m.Fields().Get(j))
		}
		out = appendEnums(out, m.Enums())
		out = appendMessages(out, m.Messages())
	}
	return out
}

func appendEnums(out []protoreflect.Descriptor, es protoreflect.EnumDescriptors) []protoreflect.Descriptor {
	for i := range es.Len() {
		e := es.Get(i)
		out = append(out, e)
		for j := range e.Values().Len() {
			out = append(out, e.Values().Get(j))
		}
	}
	return out
}

// Match checks that the source and the descriptors declare the same
// things: a descriptor the parser did not find, or a declaration the
// descriptors lack (Go code not regenerated after an edit), is an error
// naming each.
func Match(fd protoreflect.FileDescriptor, docs Docs) error {
	var missing, extra []string
	known := map[protoreflect.FullName]bool{}
	for _, d := range Elements(fd) {
		known[d.FullName()] = true
		if _, ok := docs.Decls[d.FullName()]; !ok {
			missing = append(missing, string(d.FullName()))
		}
	}
	for name, d := range docs.Decls {
		if !known[name] {
			extra = append(extra, fmt.Sprintf("%s (line %d)", name, d.Line))
		}
	}
	var errs []string
	if len(missing) > 0 {
		errs = append(errs, "in the descriptors but not found in the source: "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		errs = append(errs, "in the source but not in the descriptors (is the Go code regenerated, make proto?): "+strings.Join(extra, ", "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", fd.Path(), strings.Join(errs, "; "))
	}
	return nil
}

// Undocumented are the rpcs and fields of fd without a comment in docs,
// by full name, in the descriptors' order.
func Undocumented(fd protoreflect.FileDescriptor, docs Docs) []string {
	var out []string
	for _, d := range Elements(fd) {
		switch d.(type) {
		case protoreflect.MethodDescriptor, protoreflect.FieldDescriptor:
			if len(docs.Decls[d.FullName()].Doc) == 0 {
				out = append(out, string(d.FullName()))
			}
		}
	}
	return out
}
