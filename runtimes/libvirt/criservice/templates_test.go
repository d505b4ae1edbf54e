package criservice

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/vmtypes"
)

// warmedPod runs a pod of namespace ns asking for its template
// (RuntimeClass vm-instant) and creates its VM in the shape
// TestWarmTemplateNamespace warms (2 vCPUs, 1 GiB); it returns the
// template its VM is a clone of ("" if it boots).
func warmedPod(t *testing.T, s *Service, ns, name string) string {
	t.Helper()
	cfg := podConfig(t, name)
	cfg.Metadata.Namespace, cfg.Hostname = ns, name+"-host"
	resp, err := s.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: InstantHandler})
	if err != nil {
		t.Fatal(err)
	}
	id := createVM(t, s, resp.PodSandboxId, cfg, vmConfig(1024, 200000, 100000))
	c, err := s.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Clone.GetKey()
}

// TestWarmTemplateNamespace: a warm for namespace ns-a makes the
// template a pod of ns-a of that image and shape then restores from (no
// making of its own); a pod of ns-b does not, and boots.
func TestWarmTemplateNamespace(t *testing.T) {
	_, s, _ := instantService(t)
	info, err := s.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Namespace: "ns-a", Image: "registry.example/vm:1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != template.Ready || info.Namespace != "ns-a" || info.VCPUs != 2 || info.MemoryMiB != 1024 {
		t.Fatalf("warmed %+v, want ns-a's template of 2 vCPUs and 1024 MiB, ready", info)
	}
	if k := warmedPod(t, s, "ns-a", "a1"); k != info.Key {
		t.Fatalf("a pod of ns-a: clone of %q, want the warmed template %s", k, info.Key)
	}
	if k := warmedPod(t, s, "ns-b", "b1"); k != "" {
		t.Fatalf("a pod of ns-b is a clone of template %s, warmed for ns-a", k)
	}
	// ns-b's pod makes its template in the background: its record may
	// not exist yet when the pod's create returns.
	testutil.Eventually(t, 20*time.Second, "ns-a's template, and ns-b's made by its pod", func() error {
		list, err := s.ListTemplates(t.Context())
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
	e, s, _ := instantService(t)
	_, err := s.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Image: "registry.example/vm:1", VCPUs: 2, MemoryMiB: 1024})
	if errdefs.Code(err) != codes.InvalidArgument || !strings.HasPrefix(err.Error(), "namespace: ") {
		t.Fatalf("a warm of no namespace: %v, want InvalidArgument naming namespace", err)
	}
	if len(e.Images.Refs) != 0 {
		t.Fatalf("images prepared for a refused warm: %v", e.Images.Refs)
	}
	if all, err := s.Instant.Store.List(); err != nil || len(all) != 0 {
		t.Fatalf("templates after a refused warm: %+v, %v", all, err)
	}

	s.Instant.ShareAcrossNamespaces = true
	info, err := s.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Image: "registry.example/vm:1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil || info.State != template.Ready || info.Namespace != "" {
		t.Fatalf("a shared template: %+v, %v", info, err)
	}
	for _, ns := range []string{"ns-a", "ns-b"} {
		if k := warmedPod(t, s, ns, ns+"-pod"); k != info.Key {
			t.Fatalf("a pod of %s: clone of %q, want the shared template %s", ns, k, info.Key)
		}
	}
}

// noMakingLeft waits until no template is being made, so that a making
// a pod started ends before the test's directories are removed.
func noMakingLeft(t *testing.T, s *Service) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "no template being made", func() error {
		all, err := s.Instant.Store.List()
		if err != nil {
			return err
		}
		for _, m := range all {
			if m.State == template.Making {
				return fmt.Errorf("template %s is being made", m.Key)
			}
		}
		return nil
	})
}
