package archtest

import "strings"

// Module is crimux's module path (the test checks it against go.mod).
const Module = "github.com/crimux/crimux"

// Rule forbids imports of To by the packages From, except Allowed ones.
// Patterns are import paths; "p/..." matches p and every package below it.
type Rule struct {
	From    string
	To      string
	Allowed []string
	// SkipTests leaves _test.go files out of the rule.
	SkipTests bool
	// Why is what the rule keeps apart, said in the failure.
	Why string
}

// Rules are crimux's forbidden dependencies.
var Rules = append(baseRules, roomRules()...)

// baseRules are the rules between crimux's parts; roomRules adds those
// between the VM runtime's feature rooms.
var baseRules = []Rule{
	{From: Module + "/runtimes/containerd/...", To: Module + "/runtimes/libvirt/...",
		Why: "the runtimes stand side by side; what both need lives in neutral packages (cgroup/, internal/)"},
	{From: Module + "/vmapi/...", To: Module + "/runtimes/...",
		Why: "the VM API finds VM runtimes in the registry by their ability (vmtypes.Operator), not by type"},
	{From: Module + "/metrics/...", To: Module + "/registry/...",
		Why: "metrics read each call's runtime from its context (internal/route): routing is decided once, by the handlers"},
	// The CRI server's tests drive it through the real containerd backend
	// (cri/harness_test.go: a proxy's round trip), which is no dependency
	// of the server itself.
	{From: Module + "/cri/...", To: Module + "/runtimes/...", SkipTests: true,
		Why: "the CRI server reaches runtimes only through the registry's Backend"},
	{From: "...", To: Module + "/nodeagent/...", Allowed: []string{Module + "/cmd/crimux/...", Module + "/nodeagent/..."},
		Why: "the node agent is a client of crimux wired in by the daemon; nothing else depends on it"},
	{From: Module + "/nodeagent/...", To: Module + "/vmapi/...",
		Why: "the node agent calls the VM API through its own small interface (the proto's types), so it is unit-tested with a fake"},
	{From: Module + "/nodeagent/...", To: Module + "/runtimes/...",
		Why: "the node agent acts on VMs through the VM API only, never on a runtime directly"},
	{From: Module + "/nodeagent/...", To: Module + "/registry/...",
		Why: "the node agent acts on VMs through the VM API only, never on the registry"},
	{From: "...", To: "k8s.io/client-go/...",
		Allowed: []string{Module + "/nodeagent/...", Module + "/cmd/crimux/...", Module + "/cmd/kubectl-crimux/...", Module + "/test/...",
			Module + "/controller/...", Module + "/cmd/crimux-controller/...", Module + "/internal/kubeclient/..."},
		Why: "the Kubernetes API is the node agent's, the kubectl plugin's and the cluster controller's business (and the tests'): client-go stays out of the rest of crimux"},
	{From: Module + "/controller/...", To: Module + "/...",
		Allowed: []string{Module + "/controller/...", Module + "/kubeapi/...", Module + "/internal/kubeclient/...", Module + "/internal/testutil/..."},
		Why:     "the cluster controller speaks to nodes through the Kubernetes API alone (kubeapi's objects and annotations): nothing of a node's crimux is in it"},
	{From: Module + "/kubeapi/...", To: Module + "/...",
		Allowed: []string{Module + "/kubeapi/..."},
		Why:     "kubeapi is the annotation contract between the node agent and kubectl-crimux: it depends on nothing of crimux, so either side can change without the other"},
	{From: Module + "/converter/...", To: "golang.org/x/sys/unix", SkipTests: true,
		Why: "converters are pure: what they convert is read by their callers (a tenant's files through internal/tenantfs)"},
	{From: Module + "/converter/...", To: "syscall", SkipTests: true,
		Why: "converters are pure: what they convert is read by their callers (a tenant's files through internal/tenantfs)"},
	{From: Module + "/converter/...", To: Module + "/internal/tenantfs", SkipTests: true,
		Why: "converters are pure: the caller reads the tenant's file and hands them the bytes or a reader"},
	{From: "...", To: "github.com/digitalocean/go-libvirt/...",
		Allowed: []string{Module + "/runtimes/libvirt/virt/...", Module + "/test/bench/..."},
		Why:     "libvirt is reached through one adapter (runtimes/libvirt/virt) so the VM runtime's logic is testable; the benchmark's direct path is crimux-free on purpose"},
}

// Violation is one forbidden import.
type Violation struct {
	Rule
	// File is where the import is; Importer is its package.
	File, Importer, Imported string
}

func (v Violation) String() string {
	return v.Importer + " → " + v.Imported + " (" + v.File + "): " + v.Why
}

// Check returns every import of files that a rule forbids.
func Check(files []File, rules []Rule) []Violation {
	var out []Violation
	for _, f := range files {
		for _, imp := range f.Imports {
			for _, r := range rules {
				if r.forbids(f, imp) {
					out = append(out, Violation{Rule: r, File: f.Path, Importer: f.Package, Imported: imp})
				}
			}
		}
	}
	return out
}

func (r Rule) forbids(f File, imported string) bool {
	if f.Test && r.SkipTests {
		return false
	}
	if !Match(r.From, f.Package) || !Match(r.To, imported) {
		return false
	}
	for _, a := range r.Allowed {
		if Match(a, f.Package) {
			return false
		}
	}
	return true
}

// Match reports whether an import path matches a pattern: "..." matches
// everything, "p/..." p and every path below it, anything else itself.
func Match(pattern, importPath string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return importPath == base || strings.HasPrefix(importPath, base+"/")
	}
	return importPath == pattern
}
