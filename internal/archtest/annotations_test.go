package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// annotationLiteral is a crimux.io/ key as Go source writes it.
var annotationLiteral = regexp.MustCompile(`"(crimux\.io/[a-z0-9.-]+)`)

// annotationsIn are the crimux.io/ keys the module's non-test Go files
// under root name (test/ holds the tests' own).
func annotationsIn(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == "test" || strings.HasPrefix(d.Name(), ".")) && rel != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range annotationLiteral.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// undocumented are the keys doc does not name.
func undocumented(keys []string, doc string) []string {
	var out []string
	for _, k := range keys {
		if !strings.Contains(doc, "`"+k) {
			out = append(out, k)
		}
	}
	return out
}

// TestAnnotationsDocumented: every crimux.io/ annotation the code names
// is in docs/annotations.md.
func TestAnnotationsDocumented(t *testing.T) {
	wd, _ := os.Getwd()
	root, err := FindModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "annotations.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys := annotationsIn(t, root)
	if len(keys) < 20 {
		t.Fatalf("found only %d crimux.io/ keys in the code (%v): the scan is broken", len(keys), keys)
	}
	if missing := undocumented(keys, string(doc)); len(missing) > 0 {
		t.Errorf("docs/annotations.md lacks %v, named in the code", missing)
	}
	if got := undocumented([]string{"crimux.io/power-state", "crimux.io/new-one"}, "| `crimux.io/power-state` |"); !slices.Equal(got, []string{"crimux.io/new-one"}) {
		t.Errorf("undocumented = %v, want the new key alone", got)
	}
}
