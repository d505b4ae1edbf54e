package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite "+ReferencePath+" from the code")

// TestReferenceIsTheCode: docs/config.md is what Config and DefaultTOML
// generate (go test ./config -update rewrites it), and every key of
// Config is written in DefaultTOML under a comment.
func TestReferenceIsTheCode(t *testing.T) {
	got, err := ReferenceMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", ReferencePath)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./config -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the code (go test ./config -update rewrites it)", ReferencePath)
	}
}

// TestReferenceCatchesAnUndocumentedKey: a key in Config that
// DefaultTOML lacks, or writes without a comment, fails Reference.
func TestReferenceCatchesAnUndocumentedKey(t *testing.T) {
	keys, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]RefKey{}
	for _, k := range keys {
		byName[k.Name] = k
	}
	for name, want := range map[string]string{
		"libvirt.accel":                            "string",
		"libvirt.guest_boot_timeout":               "duration",
		"libvirt.migration.max_outgoing":           "integer",
		"runtime.handlers":                         "array of strings",
		"libvirt.template_max_making":              "integer",
		"libvirt.template_share_across_namespaces": "boolean",
	} {
		if k, ok := byName[name]; !ok || !strings.HasPrefix(k.Type, want) || k.Doc == "" {
			t.Errorf("%s: %+v, want a documented %s", name, k, want)
		}
	}
	if !byName["log_level"].Live || byName["libvirt.accel"].Live {
		t.Error("log_level is applied by a reload, libvirt.accel is not")
	}

	without := strings.Replace(DefaultTOML, "\nmetrics_address = \"\"\n", "\n", 1)
	if _, err := referenceOf(without); err == nil || !strings.Contains(err.Error(), "metrics_address") {
		t.Errorf("Reference of a DefaultTOML without metrics_address: %v, want it named", err)
	}
	uncommented := strings.Replace(DefaultTOML, "\nmetrics_address = ", "\n\nmetrics_address = ", 1)
	if _, err := referenceOf(uncommented); err == nil || !strings.Contains(err.Error(), "metrics_address (no comment)") {
		t.Errorf("Reference of a DefaultTOML with metrics_address under no comment: %v, want it named", err)
	}
}
