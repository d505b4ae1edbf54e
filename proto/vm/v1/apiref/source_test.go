package apiref

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// sample is a .proto with what the parser must tell apart.
const sample = `// The file's comment.
//
// Its second paragraph.

syntax = "proto3";

package demo.v1;

option go_package = "example.com/demo;demo";

// Svc serves.
service Svc {
  // Get gets.
  rpc Get(GetRequest) returns (GetResponse);
  rpc Watch(GetRequest)
      returns (stream GetResponse) {
    option deprecated = true;
  }
}

// Detached: a blank line follows.

message GetRequest {
  oneof which {
    // by_id has a "// not a comment" default.
    string by_id = 1 [json_name = "x//y"];
    Inner inner = 2;
  }
  map<string, Inner> labels = 3; // labels, trailing.
  // Inner is nested.
  message Inner {
    repeated int64 n = 1;
  }
  reserved 9;
}

message GetResponse {}

enum Color {
  option allow_alias = true;
  // Zero.
  COLOR_UNSPECIFIED = 0;
  COLOR_RED = 1;
}
`

// TestParse: each declaration's comment, as protoc attaches it: the //
// lines right above it and a // comment ending its line; nothing across a
// blank line; no // inside a string.
func TestParse(t *testing.T) {
	docs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"The file's comment.", "", "Its second paragraph."}; !reflect.DeepEqual(docs.File, want) {
		t.Errorf("file comment %q, want %q", docs.File, want)
	}
	want := map[protoreflect.FullName]string{
		"demo.v1.Svc":                "Svc serves.",
		"demo.v1.Svc.Get":            "Get gets.",
		"demo.v1.Svc.Watch":          "",
		"demo.v1.GetRequest":         "",
		"demo.v1.GetRequest.which":   "",
		"demo.v1.GetRequest.by_id":   `by_id has a "// not a comment" default.`,
		"demo.v1.GetRequest.inner":   "",
		"demo.v1.GetRequest.labels":  "labels, trailing.",
		"demo.v1.GetRequest.Inner":   "Inner is nested.",
		"demo.v1.GetRequest.Inner.n": "",
		"demo.v1.GetResponse":        "",
		"demo.v1.Color":              "",
		"demo.v1.COLOR_UNSPECIFIED":  "Zero.",
		"demo.v1.COLOR_RED":          "",
	}
	for name, doc := range want {
		d, ok := docs.Decls[name]
		if !ok {
			t.Errorf("%s not found", name)
			continue
		}
		if got := strings.Join(d.Doc, "\n"); got != doc {
			t.Errorf("%s: comment %q, want %q", name, got, doc)
		}
	}
	for name := range docs.Decls {
		if _, ok := want[name]; !ok {
			t.Errorf("%s found, which sample does not declare", name)
		}
	}
	if d := docs.Decls["demo.v1.Svc.Watch"]; d.Line != 15 {
		t.Errorf("Watch on line %d, want 15", d.Line)
	}
}

// TestParseRefuses: what the parser cannot read faithfully is an error
// with its line, not a comment silently lost.
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"message A {\n  /* gone */\n  string a = 1;\n}\n", "line 2: a /* comment"},
		{"message A {\n}\n}\n", "line 3: } closes nothing"},
		{"message A {\n  string a = 1;\n", "left open"},
		{"message A {\n  string a = 1;\n  string a = 2;\n}\n", "line 3: A.a declared again (first on line 2)"},
	} {
		if _, err := Parse([]byte(c.src)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): %v, want %q", c.src, err, c.want)
		}
	}
}

// TestEscape: comment text stays literal in markdown.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"vm--<id>":               `vm--\<id\>`,
		"a | b":                  `a \| b`,
		"crimux-* [A-Z._-]":      `crimux-\* \[A-Z.\_-\]`,
		"snapshot_name, _x_":     `snapshot_name, \_x\_`,
		"`code` and back\\slash": "\\`code\\` and back\\\\slash",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAnchor: headings' ids as GitHub makes them.
func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"VMRef":             "vmref",
		"Outer.Inner":       "outerinner",
		"Service VMService": "service-vmservice",
		"VM API reference":  "vm-api-reference",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}
