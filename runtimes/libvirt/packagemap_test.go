package libvirt

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageMapNamesEveryPackage: the package comment's map of the
// runtime's rooms names every package under this directory, so that a
// new room cannot come in unlisted.
func TestPackageMapNamesEveryPackage(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "runtime.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if !strings.HasPrefix(line, "\t") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if strings.HasSuffix(field, "/") {
				listed[strings.TrimSuffix(field, "/")] = true
			}
		}
	}
	for _, pkg := range packagesUnder(t, ".") {
		if !listed[pkg] {
			t.Errorf("runtime.go's package map does not name %s/", pkg)
		}
		delete(listed, pkg)
	}
	for pkg := range listed {
		t.Errorf("runtime.go's package map names %s/, which is no package here", pkg)
	}
}

// packagesUnder lists the directories below root holding non-test Go files.
func packagesUnder(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == root {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		names, _ := filepath.Glob(filepath.Join(path, "*.go"))
		for _, n := range names {
			if !strings.HasSuffix(n, "_test.go") {
				pkgs = append(pkgs, filepath.ToSlash(path))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
