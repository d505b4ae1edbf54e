package instant

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/vmtypes"
)

// warmedPod plans the VM of a pod of namespace ns asking for its template
// (RuntimeClass vm-instant) in the shape TestWarmTemplateNamespace warms
// (2 vCPUs, 1 GiB); it returns the template its VM is a clone of ("" if
// it boots).
func warmedPod(t *testing.T, r *Room, e *coretest.Env, ns, name string) string {
	t.Helper()
	a := podAsk(t, e, name, ns)
	r.PlanClone(a)
	return a.VM.Clone.GetKey()
}

// TestWarmTemplateNamespace: a warm for namespace ns-a makes the
// template a pod of ns-a of that image and shape then restores from (no
// making of its own); a pod of ns-b does not, and boots.
func TestWarmTemplateNamespace(t *testing.T) {
	r, e, _ := newRoom(t)
	info, err := r.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Namespace: "ns-a", Image: testImage, VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != template.Ready || info.Namespace != "ns-a" || info.VCPUs != 2 || info.MemoryMiB != 1024 || info.SizeBytes == 0 {
		t.Fatalf("warmed %+v, want ns-a's template of 2 vCPUs and 1024 MiB, ready, with its files' size", info)
	}
	if k := warmedPod(t, r, e, "ns-a", "a1"); k != info.Key {
		t.Fatalf("a pod of ns-a: clone of %q, want the warmed template %s", k, info.Key)
	}
	if k := warmedPod(t, r, e, "ns-b", "b1"); k != "" {
		t.Fatalf("a pod of ns-b is a clone of template %s, warmed for ns-a", k)
	}
	// ns-b's pod makes its template in the background: its record may
	// not exist yet when the pod's plan returns.
	testutil.Eventually(t, 20*time.Second, "ns-a's template, and ns-b's made by its pod", func() error {
		list, err := r.ListTemplates(t.Context())
		if err != nil {
			return err
		}
		namespaces := map[string]bool{}
		for _, l := range list {
			if l.State == template.Making {
				return fmt.Errorf("template %s is being made", l.Key)
			}
			namespaces[l.Namespace] = true
		}
		if !namespaces["ns-a"] || !namespaces["ns-b"] {
			return fmt.Errorf("templates listed %+v", list)
		}
		return nil
	})
}

// TestWarmTemplateNoNamespace: with templates per namespace, a warm
// naming none is InvalidArgument naming the field namespace, refused
// before its image is prepared; with templates shared across
// namespaces it makes the template every namespace's pods restore from.
func TestWarmTemplateNoNamespace(t *testing.T) {
	r, e, _ := newRoom(t)
	_, err := r.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Image: testImage, VCPUs: 2, MemoryMiB: 1024})
	if errdefs.Code(err) != codes.InvalidArgument || !strings.HasPrefix(err.Error(), "namespace: ") {
		t.Fatalf("a warm of no namespace: %v, want InvalidArgument naming namespace", err)
	}
	if len(e.Images.Refs) != 0 {
		t.Fatalf("images prepared for a refused warm: %v", e.Images.Refs)
	}
	if all, err := r.Maker.Store.List(); err != nil || len(all) != 0 {
		t.Fatalf("templates after a refused warm: %+v, %v", all, err)
	}

	r.Maker.ShareAcrossNamespaces = true
	info, err := r.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Image: testImage, VCPUs: 2, MemoryMiB: 1024})
	if err != nil || info.State != template.Ready || info.Namespace != "" {
		t.Fatalf("a shared template: %+v, %v", info, err)
	}
	for _, ns := range []string{"ns-a", "ns-b"} {
		if k := warmedPod(t, r, e, ns, ns+"-pod"); k != info.Key {
			t.Fatalf("a pod of %s: clone of %q, want the shared template %s", ns, k, info.Key)
		}
	}
}

// TestRemoveTemplate: a ready template is removed, its files with it;
// one being made is refused (FailedPrecondition); an unknown key is
// NotFound.
func TestRemoveTemplate(t *testing.T) {
	r, _, _ := newRoom(t)
	info := warm(t, r, "ns")
	if err := r.RemoveTemplate(t.Context(), info.Key); err != nil {
		t.Fatal(err)
	}
	if all, err := r.ListTemplates(t.Context()); err != nil || len(all) != 0 {
		t.Fatalf("templates after their removal: %+v, %v", all, err)
	}
	if err := r.RemoveTemplate(t.Context(), info.Key); !errdefs.IsNotFound(err) {
		t.Fatalf("a template removed again: %v, want NotFound", err)
	}
	making := template.Meta{Key: "0000000000000001", State: template.Making}
	if err := r.Maker.Store.Create(making); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveTemplate(t.Context(), making.Key); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a template being made removed: %v, want FailedPrecondition", err)
	}
}

// TestTemplatesOff: with templates off, the VM API's template calls are
// FailedPrecondition, a VM that asks for its template boots and says
// why, and no asks are kept.
func TestTemplatesOff(t *testing.T) {
	r, e, _ := newRoom(t)
	r.Maker = nil
	if _, err := r.ListTemplates(t.Context()); errdefs.Code(err) != codes.FailedPrecondition {
		t.Errorf("list: %v, want FailedPrecondition", err)
	}
	if _, err := r.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Namespace: "ns", Image: testImage, VCPUs: 2, MemoryMiB: 1024}); errdefs.Code(err) != codes.FailedPrecondition {
		t.Errorf("warm: %v, want FailedPrecondition", err)
	}
	if err := r.RemoveTemplate(t.Context(), "0000000000000001"); errdefs.Code(err) != codes.FailedPrecondition {
		t.Errorf("remove: %v, want FailedPrecondition", err)
	}
	a := podAsk(t, e, "first", "ns")
	if why := r.PlanClone(a); why != "templates are off on this node" || a.VM.Clone != nil {
		t.Errorf("a VM asking for its template: cold %q, clone %+v", why, a.VM.Clone)
	}
	r.ForgetAsks("first")
	c := &store.Container{Clone: &store.Clone{Key: "0000000000000001"}}
	if err := r.CopyDisk(c, t.TempDir()+"/disk"); errdefs.Code(err) != codes.FailedPrecondition {
		t.Errorf("a clone's disk: %v, want FailedPrecondition", err)
	}
	if _, err := r.CloneXML(c, vm.Spec{}); errdefs.Code(err) != codes.FailedPrecondition {
		t.Errorf("a clone's domain: %v, want FailedPrecondition", err)
	}
}
