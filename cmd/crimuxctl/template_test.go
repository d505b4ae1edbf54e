package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

func (f *fakeVMService) ListTemplates(_ context.Context, r *vmv1.ListTemplatesRequest) (*vmv1.ListTemplatesResponse, error) {
	f.got(r)
	return &vmv1.ListTemplatesResponse{Templates: []*vmv1.Template{
		{Key: "0123456789abcdef", Namespace: "ns-a", Image: "img", Vcpus: 2, MemoryMib: 1024, Accel: "tcg", State: "ready"},
		{Key: "fedcba9876543210", Image: "img", Vcpus: 1, MemoryMib: 512, Accel: "tcg", State: "ready"},
	}}, nil
}

func (f *fakeVMService) WarmTemplate(_ context.Context, r *vmv1.WarmTemplateRequest) (*vmv1.WarmTemplateResponse, error) {
	f.got(r)
	time.Sleep(warmTakes)
	return &vmv1.WarmTemplateResponse{Template: &vmv1.Template{Key: "0123456789abcdef", Namespace: r.GetNamespace(), Image: r.GetImage(),
		Vcpus: r.GetVcpus(), MemoryMib: r.GetMemoryMib(), Accel: "tcg", State: "ready"}}, nil
}

// warmTakes is how long the fake's WarmTemplate takes.
var warmTakes time.Duration

// TestTemplateWarmSaysItWaits: a warm that takes long says what it makes,
// then how long it has waited, on stderr.
func TestTemplateWarmSaysItWaits(t *testing.T) {
	_, ep := serveFake(t)
	warmTakes, progressEvery = 250*time.Millisecond, 100*time.Millisecond
	defer func() { warmTakes, progressEvery = 0, 15*time.Second }()
	code, _, errOut := runCLI("--endpoint", ep, "template", "warm", "img", "--memory", "1Gi")
	if code != exitOK || !strings.Contains(errOut, "making the template of img (1 vCPUs, 1024 MiB) for namespace default ...") ||
		!strings.Contains(errOut, "still waiting:") {
		t.Fatalf("exit %d, stderr %q; want what it makes and that it still waits", code, errOut)
	}
}

// TestTemplateWarm: warm sends its image, shape and namespace (kubectl's
// default, "default", unless --namespace names another) and says which
// namespace its template serves.
func TestTemplateWarm(t *testing.T) {
	f, ep := serveFake(t)
	for _, tc := range []struct {
		args []string
		want *vmv1.WarmTemplateRequest
	}{
		{[]string{"template", "warm", "img", "--cpus", "2", "--memory", "1Gi"},
			&vmv1.WarmTemplateRequest{Image: "img", Vcpus: 2, MemoryMib: 1024, Namespace: "default"}},
		{[]string{"template", "warm", "--namespace", "ns-a", "img", "--memory", "512"},
			&vmv1.WarmTemplateRequest{Image: "img", Vcpus: 1, MemoryMib: 512, Namespace: "ns-a"}},
	} {
		code, out, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr %s", tc.args, code, errOut)
		}
		if !proto.Equal(f.lastRequest(), tc.want) {
			t.Fatalf("%v: request %v, want %v", tc.args, f.lastRequest(), tc.want)
		}
		if want := "namespace " + tc.want.GetNamespace() + "): ready"; !strings.Contains(out, want) {
			t.Fatalf("%v: output %q lacks %q", tc.args, out, want)
		}
	}
	if code, _, errOut := runCLI("--endpoint", ep, "template", "warm", "img", "--memory", "1Gi", "--namespace", ""); code != exitUsage ||
		!strings.Contains(errOut, "--namespace") {
		t.Fatalf("an empty --namespace: exit %d, stderr %q; want a usage error", code, errOut)
	}
}

// TestTemplateList: the table names each template's namespace, (all)
// for one shared across namespaces.
func TestTemplateList(t *testing.T) {
	_, ep := serveFake(t)
	code, out, errOut := runCLI("--endpoint", ep, "template", "list")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "NAMESPACE") {
		t.Fatalf("template list:\n%s", out)
	}
	for i, want := range []string{"0123456789abcdef  ns-a", "fedcba9876543210  (all)"} {
		if !strings.HasPrefix(lines[i+1], want) {
			t.Fatalf("template list line %d %q, want it to start %q", i+1, lines[i+1], want)
		}
	}
}

// TestTemplateHelp: template's usage and warm's help name --namespace
// and its default.
func TestTemplateHelp(t *testing.T) {
	for _, args := range [][]string{{"template", "--help"}, {"template", "warm", "--help"}} {
		code, out, _ := runCLI(args...)
		if code != exitOK || !strings.Contains(out, "--namespace NS") || !strings.Contains(out, `"default"`) {
			t.Errorf("%v: exit %d, help lacks --namespace NS and its default:\n%s", args, code, out)
		}
	}
}
