package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cri/statusinfo"
	"github.com/crimux/crimux/internal/version"
)

// fakeRuntime answers the CRI calls version and runtimes make.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "crimux", RuntimeVersion: "1.2.3", RuntimeApiVersion: "v1"}, nil
}

func (fakeRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	info, err := json.Marshal(statusinfo.Info{Runtimes: []statusinfo.Runtime{
		{Name: "containerd", Type: "containerd", Handlers: []string{"runc"}, Primary: true, Ready: true},
		{Name: "vm", Type: "libvirt", Handlers: []string{"vm", "vm-instant"}, Reason: "NoKVM", Message: "no /dev/kvm:\nTCG"},
	}})
	return &runtimeapi.StatusResponse{Info: map[string]string{statusinfo.Key: string(info)}}, err
}

// asJSONValue decodes YAML or JSON into what encoding/json makes of the
// document, so that the two can be compared.
func asJSONValue(t *testing.T, doc string, isYAML bool) any {
	t.Helper()
	b := []byte(doc)
	if isYAML {
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatalf("YAML %s: %v", doc, err)
		}
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	return v
}

// TestYAMLOutput: -o yaml, before or after the command, is the object -o
// json prints, with the same field names, scalars of the same types
// (protojson's 64-bit integers stay strings).
func TestYAMLOutput(t *testing.T) {
	_, ep := serveFake(t)
	for _, args := range [][]string{
		{"template", "list"},
		{"version"},
		{"runtimes"},
		{"vm", "list"},
		{"vm", "get", "vm--c1"},
		{"vm", "snapshot", "list", "vm--c1"},
		{"vm", "snapshot", "delete", "vm--c1", "s1"},
		{"gc"},
	} {
		code, jsonOut, errOut := runCLI(append([]string{"--endpoint", ep, "-o", "json"}, args...)...)
		if code != exitOK {
			t.Fatalf("%v -o json: exit %d: %s", args, code, errOut)
		}
		code, yamlOut, errOut := runCLI(append(append([]string{"--endpoint", ep}, args...), "-o", "yaml")...)
		if code != exitOK {
			t.Fatalf("%v -o yaml: exit %d: %s", args, code, errOut)
		}
		if strings.HasPrefix(strings.TrimSpace(yamlOut), "{") && strings.TrimSpace(yamlOut) != "{}" {
			t.Errorf("%v -o yaml is in flow style:\n%s", args, yamlOut)
		}
		if j, y := asJSONValue(t, jsonOut, false), asJSONValue(t, yamlOut, true); !reflect.DeepEqual(j, y) {
			t.Errorf("%v: -o yaml %v, -o json %v", args, y, j)
		}
	}
}

// TestYAMLTemplateListAndVersion: the YAML of template list and version,
// as a person reads it.
func TestYAMLTemplateListAndVersion(t *testing.T) {
	_, ep := serveFake(t)
	_, out, _ := runCLI("--endpoint", ep, "-o", "yaml", "template", "list")
	for _, want := range []string{"templates:\n  - key: 0123456789abcdef\n    image: img\n", "    vcpus: 2\n", "    memory_mib: \"1024\"\n",
		"    namespace: ns-a\n", "  - key: fedcba9876543210\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("template list -o yaml lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCLI("--endpoint", ep, "version", "-o", "yaml")
	want := "client: " + version.Version + "\nserver:\n  version: 0.1.0\n  runtime_name: crimux\n  runtime_version: 1.2.3\n  runtime_api_version: v1\n"
	if out != want {
		t.Errorf("version -o yaml:\n%s\nwant:\n%s", out, want)
	}
}

// TestOutputFormatUsage: an -o none of table, json and yaml is bad usage
// naming them, for every command that prints (store rebuild included,
// which checks it before it reads the config).
func TestOutputFormatUsage(t *testing.T) {
	_, ep := serveFake(t)
	for _, args := range [][]string{{"-o", "yml", "version"}, {"template", "list", "-o", "xml"}, {"vm", "get", "vm--c1", "-o", "text"}} {
		code, _, errOut := runCLI(append([]string{"--endpoint", ep}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "want table, json or yaml") {
			t.Errorf("%v: exit %d, stderr %q; want %d naming table, json and yaml", args, code, errOut, exitUsage)
		}
	}
	if code, _, errOut, _ := storeCLI("rebuild", "--config", "/dev/null", "-o", "xml"); code != exitUsage ||
		!strings.Contains(errOut, "want table, json or yaml") {
		t.Errorf("store rebuild -o xml: exit %d, stderr %q", code, errOut)
	}
}
