package vmapi_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crimux/crimux/internal/errdefs"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// The fake VM runtime's templates (vmtypes.Templates), per namespace as
// the VM runtime's are by default: a warm of no namespace is refused.

const warmedKey = "0123456789abcdef"

func (f *fakeVMs) ListTemplates(context.Context) ([]vmtypes.TemplateInfo, error) {
	return []vmtypes.TemplateInfo{
		{Key: warmedKey, Namespace: "ns-a", Image: "img", State: "ready"},
		{Key: "fedcba9876543210", Image: "img", State: "ready"}, // shared across namespaces
	}, nil
}

func (f *fakeVMs) WarmTemplate(_ context.Context, w vmtypes.TemplateWarm) (vmtypes.TemplateInfo, error) {
	f.record("WarmTemplate ns=%s image=%s vcpus=%d memory=%d", w.Namespace, w.Image, w.VCPUs, w.MemoryMiB)
	if w.Namespace == "" {
		return vmtypes.TemplateInfo{}, errdefs.Invalid("namespace", "must name the namespace whose pods the template serves")
	}
	return vmtypes.TemplateInfo{Key: warmedKey, Namespace: w.Namespace, Image: w.Image, VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, State: "ready"}, nil
}

func (f *fakeVMs) RemoveTemplate(_ context.Context, key string) error {
	f.record("RemoveTemplate %s", key)
	return nil
}

// TestWarmTemplate: a warm's namespace reaches the runtime with its
// image and shape, and the template comes back with it; the runtime's
// refusal of no namespace is InvalidArgument naming namespace.
func TestWarmTemplate(t *testing.T) {
	ctx := context.Background()
	vms := newVMs()
	c := newClient(t, vms)
	resp, err := c.WarmTemplate(ctx, &vmv1.WarmTemplateRequest{Image: "img", Vcpus: 2, MemoryMib: 1024, Namespace: "ns-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := vms.lastCall(), "WarmTemplate ns=ns-a image=img vcpus=2 memory=1024"; got != want {
		t.Fatalf("runtime called %q, want %q", got, want)
	}
	if tpl := resp.GetTemplate(); tpl.GetNamespace() != "ns-a" || tpl.GetKey() != warmedKey || tpl.GetState() != "ready" {
		t.Fatalf("warmed %v", tpl)
	}

	_, err = c.WarmTemplate(ctx, &vmv1.WarmTemplateRequest{Image: "img", Vcpus: 2, MemoryMib: 1024})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "namespace") {
		t.Fatalf("a warm of no namespace: %v, want InvalidArgument naming namespace", err)
	}

	vms.calls = nil
	_, err = c.WarmTemplate(ctx, &vmv1.WarmTemplateRequest{Vcpus: 2, MemoryMib: 1024, Namespace: "ns-a"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "image") {
		t.Fatalf("a warm of no image: %v, want InvalidArgument naming image", err)
	}
	if got := vms.lastCall(); got != "" {
		t.Fatalf("an invalid warm reached the runtime: %s", got)
	}
}

// TestListTemplatesNamespace: each template is listed with the
// namespace it serves; a shared one with none.
func TestListTemplatesNamespace(t *testing.T) {
	c := newClient(t, newVMs())
	resp, err := c.ListTemplates(context.Background(), &vmv1.ListTemplatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tpl := range resp.GetTemplates() {
		got[tpl.GetKey()] = tpl.GetNamespace()
	}
	if len(got) != 2 || got[warmedKey] != "ns-a" || got["fedcba9876543210"] != "" {
		t.Fatalf("templates' namespaces %v", got)
	}
}
