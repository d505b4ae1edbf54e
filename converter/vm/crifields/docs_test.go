package crifields

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite "+DocsPath+" from the table")

// root is the module's root, from this package's directory.
const root = "../../.."

// TestDocsFromTable: docs/cri-fields.md is what the table generates (go
// test -update rewrites it).
func TestDocsFromTable(t *testing.T) {
	path := filepath.Join(root, DocsPath)
	got := Decisions().Markdown()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./converter/vm/crifields -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the table (go test ./converter/vm/crifields -update rewrites it)", DocsPath)
	}
}

// TestREADMESummary: the README carries the table's summary as it is.
func TestREADMESummary(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	summary := Decisions().Summary()
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), summary) {
		t.Errorf("README.md lacks the table's summary (wrap it as you like):\n%s", summary)
	}
	if !strings.Contains(string(readme), "("+DocsPath+")") {
		t.Errorf("README.md does not link %s", DocsPath)
	}
}

// TestMarkdownSaysEveryDecision: each refusal's condition reaches the
// page, and nested fields link their message's section.
func TestMarkdownSaysEveryDecision(t *testing.T) {
	md := string(Decisions().Markdown())
	for _, want := range []string{
		"| `pid` | **refused** when NODE or TARGET |",
		"| `command` | **refused** when not empty |",
		"| `privileged` | **refused** when true |",
		"| `stop_signal` | **refused** when other than SIGNAL_RUNTIME_DEFAULT, SIGNAL_SIGTERM and SIGNAL_SIGKILL |",
		"| `mounts` | see [Mount](#mount) |",
		"\n## LinuxContainerResources\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
