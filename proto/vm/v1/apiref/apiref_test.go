package apiref

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

var update = flag.Bool("update", false, "rewrite "+DocsPath+" from "+SourcePath)

// root is the module's root, from this package's directory.
const root = "../../../.."

const hint = "go test ./proto/vm/v1/apiref -update"

func source(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, SourcePath))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestVMAPIReference: docs/vm-api.md is what the VM API's descriptors
// and vm.proto's comments generate (-update rewrites it).
func TestVMAPIReference(t *testing.T) {
	if !strings.HasSuffix(SourcePath, File.Path()) {
		t.Fatalf("SourcePath %s is not the descriptor's file %s", SourcePath, File.Path())
	}
	got, err := Markdown(File, source(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, DocsPath)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s writes it)", err, hint)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s and the VM API's Go code (%s rewrites it); %s",
			DocsPath, SourcePath, hint, firstDiff(string(want), string(got)))
	}
}

// firstDiff names the first line where the page on disk (want) and the
// generated one (got) differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("first at line %d:\n  on disk:   %q\n  generated: %q", i+1, wl, gl)
		}
	}
	return "they differ"
}

// undocumentedToday are the rpcs and fields, by message, that vm.proto
// leaves without a comment of their own today: most sit under a comment
// written for the field above them, which protoc (and this package) give
// that field only. The list may only shrink: a new rpc or field without
// a comment fails TestEveryRPCAndFieldDocumented, and so does one listed
// here that has a comment now.
var undocumentedToday = fullNames(map[string][]string{
	"PodName":                    {"namespace", "name"},
	"VM":                         {"container_id", "namespace", "name", "container_state", "domain_state", "resources", "image", "snapshots", "started_at"},
	"Resources":                  {"vcpus", "memory_mib"},
	"Snapshot":                   {"name", "description"},
	"ListVMsResponse":            {"vms"},
	"GetVMRequest":               {"vm"},
	"GetVMResponse":              {"vm"},
	"RebootVMRequest":            {"vm"},
	"RebootVMResponse":           {"method"},
	"SetPowerStateRequest":       {"vm", "state"},
	"SetPowerStateResponse":      {"previous", "state"},
	"CreateSnapshotRequest":      {"vm", "description"},
	"CreateSnapshotResponse":     {"snapshot"},
	"ListSnapshotsRequest":       {"vm"},
	"ListSnapshotsResponse":      {"snapshots"},
	"RestoreSnapshotRequest":     {"vm", "snapshot_name"},
	"DeleteSnapshotRequest":      {"vm", "snapshot_name"},
	"CollectForeignRequest":      {"action", "name"},
	"Template":                   {"image", "image_digest", "vcpus", "max_vcpus", "memory_mib", "max_memory_mib", "accel", "error", "ready_at"},
	"WarmTemplateRequest":        {"memory_mib"},
	"WarmTemplateResponse":       {"template"},
	"RemoveTemplateRequest":      {"key"},
	"GetMigrationSourceRequest":  {"vm"},
	"GetMigrationSourceResponse": {"source"},
	"Seal":                       {"signature"},
	"PrepareMigrationRequest":    {"source"},
	"PrepareMigrationResponse":   {"target"},
	"MigrationTarget":            {"domain_name"},
	"MigrateRequest":             {"target"},
	"MigrateProgress":            {"elapsed_ms", "data_total_bytes", "data_processed_bytes", "data_remaining_bytes"},
})

// fullNames are the full names of the VM API's fields by message.
func fullNames(byMessage map[string][]string) map[string]bool {
	out := map[string]bool{}
	for msg, fields := range byMessage {
		for _, f := range fields {
			out[string(File.Package())+"."+msg+"."+f] = true
		}
	}
	return out
}

// TestEveryRPCAndFieldDocumented: every rpc and every field of the VM
// API has a comment in vm.proto, but those of undocumentedToday.
func TestEveryRPCAndFieldDocumented(t *testing.T) {
	docs, err := Parse(source(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Match(File, docs); err != nil {
		t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, name := range Undocumented(File, docs) {
		missing[name] = true
		if !undocumentedToday[name] {
			t.Errorf("%s (%s:%d) has no comment: say what it is in // lines right above it",
				name, SourcePath, docs.Decls[protoreflect.FullName(name)].Line)
		}
	}
	for name := range undocumentedToday {
		if _, ok := docs.Decls[protoreflect.FullName(name)]; !ok {
			t.Errorf("%s is in undocumentedToday but not in %s: take it off the list", name, SourcePath)
		} else if !missing[name] {
			t.Errorf("%s has a comment now: take it off undocumentedToday (and run %s)", name, hint)
		}
	}
}

// TestUndocumentedCatchesAField: a field whose comment goes is named.
func TestUndocumentedCatchesAField(t *testing.T) {
	const comment = "  // hard resets at once, without asking the guest.\n  bool hard = 2;\n"
	src := string(source(t))
	if !strings.Contains(src, comment) {
		t.Fatalf("%s no longer has the comment this test removes: %q", SourcePath, comment)
	}
	docs, err := Parse([]byte(strings.Replace(src, comment, "  bool hard = 2;\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Undocumented(File, docs), " "); !strings.Contains(got, "crimux.vm.v1.RebootVMRequest.hard") {
		t.Errorf("Undocumented without RebootVMRequest.hard's comment: %s, want it named", got)
	}
}

// TestMatchNamesTheDifference: a field the source lacks, and one the
// descriptors lack, are named, and the page is not made.
func TestMatchNamesTheDifference(t *testing.T) {
	src := string(source(t))
	for _, c := range []struct{ old, new, want string }{
		{"  bool hard = 2;\n", "\n", "not found in the source: crimux.vm.v1.RebootVMRequest.hard"},
		{"  bool hard = 2;\n", "  bool hard = 2;\n  bool gentle = 4;\n", "crimux.vm.v1.RebootVMRequest.gentle (line"},
	} {
		if !strings.Contains(src, c.old) {
			t.Fatalf("%s no longer has %q", SourcePath, c.old)
		}
		_, err := Markdown(File, []byte(strings.Replace(src, c.old, c.new, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Markdown with %q as %q: %v, want %q", c.old, c.new, err, c.want)
		}
	}
}
