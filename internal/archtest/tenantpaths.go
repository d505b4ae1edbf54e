package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A tenant's volume (a durable VM's root volume, the cloud-init volume,
// a share's directory, anything under a CRI mount or device) is written
// by the tenant while crimux, root, works in it: a name there looked up
// twice may be a symbolic link to a host file by the second look-up. So
// names in it are resolved once, beneath the volume's directory, in
// internal/tenantfs, and the descriptor is handed on (to qemu-img as
// /dev/fd/N). The tenant-path rule (tenantrules.go) keeps the other ways
// to a path out of the code that handles volumes: in its scope, every use
// of a function that looks a path up, and every use of the qemu-img
// binary, must be one the rule allows, one by one, each with its reason.

// TenantScope is code that takes tenant volume paths: a package's
// directory, or one file of it (module-relative, slash-separated).
type TenantScope struct {
	Path string
	// Why says which tenant paths it takes.
	Why string
}

// PathAllowance allows, in File's function Func, exactly Calls: each
// use ("os.OpenFile", "unix.Open", QemuImg) as many times as its count.
// Func is "f", "T.m" for a method, or a package-level variable's name.
type PathAllowance struct {
	File  string
	Func  string
	Calls map[string]int
	// Why says what path each call takes and why it is not a name in a
	// tenant's volume, or why looking it up is safe.
	Why string
}

// QemuImg names a use of the qemu-img binary: the literal "qemu-img" (or
// a path ending in it), or a package-level variable or constant set to it.
const QemuImg = "qemu-img"

// TenantPathRule is the rule: Forbidden maps an import path to the
// functions of it that look a path up.
type TenantPathRule struct {
	Scopes    []TenantScope
	Forbidden map[string][]string
	Allowed   []PathAllowance
}

// PathUse is a forbidden function (or qemu-img) used in a scope.
type PathUse struct {
	File, Func, Call string
	Line             int
	// HostPath: a use of qemu-img in a call whose later arguments name a
	// volume's host path (a HostPath field, GetHostPath or DiskPath).
	HostPath bool
}

// PathViolation is a function's uses of Call that the rule does not
// allow: more of them than allowed (Allowed, often 0), or a volume's
// host path given to qemu-img (Allowed -1).
type PathViolation struct {
	File, Func, Call string
	Lines            []int
	Allowed          int
}

func (v PathViolation) String() string {
	lines := make([]string, len(v.Lines))
	for i, l := range v.Lines {
		lines[i] = strconv.Itoa(l)
	}
	where := v.File + ":" + strings.Join(lines, ",") + " " + v.Func
	if v.Allowed < 0 {
		return where + ": a volume's host path given to qemu-img: hand it a descriptor of a file opened in internal/tenantfs (/dev/fd/N, tenantfs.ChildFiles)"
	}
	return fmt.Sprintf("%s: %s used %d times, %d allowed: reach a tenant's volume through internal/tenantfs, or allow the call in tenantrules.go saying why its path is no name in a tenant's volume",
		where, v.Call, len(v.Lines), v.Allowed)
}

// CheckTenantPaths checks the module at root against the rule. stale
// are allowances that allow more than the code does (a call gone, or
// moved): an allow-list must say what the code does, no more.
func CheckTenantPaths(root string, rule TenantPathRule) (violations []PathViolation, stale []PathAllowance, err error) {
	uses, err := TenantPathUses(root, rule)
	if err != nil {
		return nil, nil, err
	}
	type key struct{ file, fn, call string }
	lines := map[key][]int{}
	var order []key
	for _, u := range uses {
		if u.HostPath { // whatever the allow-list says; the use itself is counted apart
			violations = append(violations, PathViolation{File: u.File, Func: u.Func, Call: u.Call, Lines: []int{u.Line}, Allowed: -1})
			continue
		}
		k := key{u.File, u.Func, u.Call}
		if lines[k] == nil {
			order = append(order, k)
		}
		lines[k] = append(lines[k], u.Line)
	}
	allowed := map[key]int{}
	for _, a := range rule.Allowed {
		for call, n := range a.Calls {
			allowed[key{a.File, a.Func, call}] += n
		}
	}
	for _, k := range order {
		if n := len(lines[k]); n > allowed[k] {
			violations = append(violations, PathViolation{File: k.file, Func: k.fn, Call: k.call, Lines: lines[k], Allowed: allowed[k]})
		}
	}
	for _, a := range rule.Allowed {
		for call, n := range a.Calls {
			if n <= 0 || len(lines[key{a.File, a.Func, call}]) < allowed[key{a.File, a.Func, call}] {
				stale = append(stale, a)
				break
			}
		}
	}
	return violations, stale, nil
}

// TenantPathUses finds every use the rule is about in its scopes, in
// non-test, non-generated files. A scope naming no Go file is an error:
// a typo there would make the rule guard nothing, silently.
func TenantPathUses(root string, rule TenantPathRule) ([]PathUse, error) {
	var uses []PathUse
	for _, s := range rule.Scopes {
		dir, only := s.Path, ""
		if strings.HasSuffix(s.Path, ".go") {
			dir, only = path.Dir(s.Path), s.Path
		}
		files, err := parseDir(root, dir)
		if err != nil {
			return nil, err
		}
		names, decls := qemuImgNames(files)
		seen := false
		for _, f := range files {
			if only != "" && f.path != only {
				continue
			}
			seen = true
			uses = append(uses, f.uses(rule.Forbidden, names, decls)...)
		}
		if !seen {
			return nil, fmt.Errorf("archtest: tenant-path scope %s holds no Go file", s.Path)
		}
	}
	return uses, nil
}

// parsedFile is one file of a scope's package, parsed whole.
type parsedFile struct {
	path string // module-relative
	fset *token.FileSet
	ast  *ast.File
}

// parseDir parses the non-test, non-generated Go files of dir.
func parseDir(root, dir string) ([]parsedFile, error) {
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, fmt.Errorf("archtest: tenant-path scope: %w", err)
	}
	var out []parsedFile
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(dir), name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("archtest: %w", err)
		}
		if !ast.IsGenerated(f) {
			out = append(out, parsedFile{path: path.Join(dir, name), fset: fset, ast: f})
		}
	}
	return out, nil
}

// isQemuImg reports whether a literal names the qemu-img binary.
func isQemuImg(lit *ast.BasicLit) bool {
	s, err := strconv.Unquote(lit.Value)
	return err == nil && lit.Kind == token.STRING && path.Base(s) == QemuImg
}

// qemuImgNames are the package-level variables and constants set to the
// qemu-img binary, and their declarations' names and literals (which are
// no uses).
func qemuImgNames(files []parsedFile) (names map[string]bool, decls map[ast.Node]bool) {
	names, decls = map[string]bool{}, map[ast.Node]bool{}
	for _, f := range files {
		for _, d := range f.ast.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && isQemuImg(lit) && i < len(vs.Names) {
						names[vs.Names[i].Name] = true
						decls[lit], decls[vs.Names[i]] = true, true
					}
				}
			}
		}
	}
	return names, decls
}

// uses are the file's uses of forbidden functions (called or taken as a
// value) and of qemu-img, each named by the declaration it is in.
func (f parsedFile) uses(forbidden map[string][]string, qemu map[string]bool, decls map[ast.Node]bool) []PathUse {
	pkgs := map[string]string{} // the file's name for a package → its import path
	var out []PathUse
	for _, imp := range f.ast.Imports {
		ip, err := strconv.Unquote(imp.Path.Value)
		if _, ok := forbidden[ip]; err != nil || !ok {
			continue
		}
		local := path.Base(ip)
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == "." { // its functions would be called by bare names, which the rule cannot tell
			out = append(out, PathUse{File: f.path, Func: "import", Call: ". " + ip, Line: f.fset.Position(imp.Pos()).Line})
		}
		pkgs[local] = ip
	}
	for _, part := range f.declParts() {
		use := func(n ast.Node, call string, hostPath bool) {
			out = append(out, PathUse{File: f.path, Func: part.name, Call: call, Line: f.fset.Position(n.Pos()).Line, HostPath: hostPath})
		}
		var visit func(ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok {
					if ip, ok := pkgs[x.Name]; ok && slices.Contains(forbidden[ip], n.Sel.Name) {
						use(n, path.Base(ip)+"."+n.Sel.Name, false)
					}
				}
				ast.Inspect(n.X, visit) // not n.Sel: a field or method is no use
				return false
			case *ast.Field:
				if n.Type != nil { // not n.Names: a field or parameter declared is no use
					ast.Inspect(n.Type, visit)
				}
				return false
			case *ast.CallExpr:
				for i, a := range n.Args {
					if isQemuImgUse(a, qemu, decls) && slices.ContainsFunc(n.Args[i+1:], namesHostPath) {
						use(a, QemuImg, true)
					}
				}
			case *ast.Ident, *ast.BasicLit:
				if isQemuImgUse(n.(ast.Expr), qemu, decls) {
					use(n, QemuImg, false)
				}
			}
			return true
		}
		ast.Inspect(part.node, visit)
	}
	return out
}

// declPart is a function, or one spec of a package-level declaration,
// with the name a PathAllowance gives it.
type declPart struct {
	name string
	node ast.Node
}

func (f parsedFile) declParts() []declPart {
	var out []declPart
	for _, d := range f.ast.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			out = append(out, declPart{funcName(d), d})
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					out = append(out, declPart{s.Names[0].Name, s})
				case *ast.TypeSpec:
					out = append(out, declPart{s.Name.Name, s})
				}
			}
		}
	}
	return out
}

// funcName is "f", or "T.m" for a method of T or *T.
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch g := t.(type) {
	case *ast.IndexExpr:
		t = g.X
	case *ast.IndexListExpr:
		t = g.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// isQemuImgUse: e is the literal "qemu-img" or a name set to it, and not
// their declaration.
func isQemuImgUse(e ast.Expr, qemu map[string]bool, decls map[ast.Node]bool) bool {
	if decls[e] {
		return false
	}
	switch e := e.(type) {
	case *ast.Ident:
		return qemu[e.Name]
	case *ast.BasicLit:
		return isQemuImg(e)
	}
	return false
}

// hostPathNames are how crimux names the host path of a volume, a CRI
// mount or a device: a field, its getter, the root volume's disk file.
var hostPathNames = []string{"HostPath", "GetHostPath", "DiskPath"}

// namesHostPath reports whether e mentions a host path by one of
// hostPathNames (v.HostPath, m.GetHostPath(), rootvol.DiskPath(v)).
func namesHostPath(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			found = found || slices.Contains(hostPathNames, n.Sel.Name)
		case *ast.Ident:
			found = found || n.Name == "DiskPath"
		}
		return !found
	})
	return found
}
