// Package archtest keeps crimux's architecture from eroding: it reads the
// imports of every Go file of the module (tests included, generated code
// and testdata not) and checks them against a small table of forbidden
// dependencies (rules.go). Its test runs under `make unit`, so a forbidden
// import fails the build, naming the importer, the imported package and
// the file. A second rule reads the code that takes tenants' volume paths
// whole (tenantpaths.go, tenantrules.go): a path there is looked up, and
// qemu-img run, only where the rule allows it, each with its reason.
package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// File is the imports of one Go file.
type File struct {
	// Path is the file's path relative to the module root, slash-separated.
	Path string
	// Package is the import path of the file's directory (an external
	// test package counts as the package it tests).
	Package string
	// Test is true for a _test.go file.
	Test    bool
	Imports []string
}

// Load parses the imports of every non-generated Go file under root, the
// directory of the module's go.mod. It skips what the go tool skips
// (testdata, directories starting with "." or "_", vendor) and nested
// modules (directories with a go.mod of their own: not this module).
func Load(root string) ([]File, error) {
	module, err := ModulePath(root)
	if err != nil {
		return nil, err
	}
	var files []File
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return skipDir(root, p, d)
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, ok, err := parseFile(root, module, p)
		if ok {
			files = append(files, f)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archtest: %w", err)
	}
	return files, nil
}

func skipDir(root, p string, d fs.DirEntry) error {
	if p == root {
		return nil
	}
	name := d.Name()
	if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
		return filepath.SkipDir
	}
	return nil
}

// parseFile reads the imports of one file; ok is false for generated code.
func parseFile(root, module, p string) (File, bool, error) {
	parsed, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return File{}, false, err
	}
	if ast.IsGenerated(parsed) {
		return File{}, false, nil
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return File{}, false, err
	}
	rel = filepath.ToSlash(rel)
	f := File{Path: rel, Package: path.Join(module, path.Dir(rel)), Test: strings.HasSuffix(rel, "_test.go")}
	for _, imp := range parsed.Imports {
		ip, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return File{}, false, fmt.Errorf("%s: import %s: %w", rel, imp.Path.Value, err)
		}
		f.Imports = append(f.Imports, ip)
	}
	return f, true, nil
}

// ModulePath reads the module path from root's go.mod.
func ModulePath(root string) (string, error) {
	gomod, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("archtest: %w", err)
	}
	defer gomod.Close()
	lines := bufio.NewScanner(gomod)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := lines.Err(); err != nil {
		return "", fmt.Errorf("archtest: %s: %w", gomod.Name(), err)
	}
	return "", errors.New("archtest: " + gomod.Name() + " has no module line")
}

// FindModuleRoot walks up from dir to the directory holding go.mod.
func FindModuleRoot(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("archtest: no go.mod above the working directory")
		}
		dir = parent
	}
}
