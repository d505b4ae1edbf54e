package criservice

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
)

// These tests hold the limits on templates: one namespace's template
// serves no other, a template is used only if its stored meta is the
// request's in full, and the node makes no more templates at once than
// its cap.

// instantPodIn is instantPod in namespace ns.
func instantPodIn(t *testing.T, s *Service, ns, name string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := podConfig(t, name)
	cfg.Metadata.Namespace, cfg.Hostname = ns, name+"-host"
	return runSandbox(t, s, cfg, instant.Handler), cfg
}

func runSandbox(t *testing.T, s *Service, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	resp, err := s.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PodSandboxId
}

// readyTemplate waits for the one template made, ready, and returns it.
func readyTemplate(t *testing.T, s *Service) template.Meta {
	t.Helper()
	var meta template.Meta
	testutil.Eventually(t, 10*time.Second, "the template made", func() error {
		all, err := makerOf(s).Store.List()
		if err != nil || len(all) != 1 || all[0].State != template.Ready {
			return fmt.Errorf("templates %+v, %v", all, err)
		}
		meta = all[0]
		return nil
	})
	return meta
}

// noMaking waits until no template is being made (so that a test's
// makings end before its directories are removed).
func noMaking(t *testing.T, s *Service) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "no template being made", func() error {
		all, err := makerOf(s).Store.List()
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

func cloneOf(t *testing.T, e *coretest.Env, id string) string {
	t.Helper()
	c, err := e.R.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Clone.GetKey()
}

// TestTemplatePerNamespace: a template made for a pod of namespace ns-a
// is not restored into a pod of ns-b (their clones would share the
// template's kernel secrets, boot ID and address layout); ns-b's pod
// boots, and says why; a second pod of ns-a is a clone.
func TestTemplatePerNamespace(t *testing.T) {
	e, s, _ := instantService(t)
	sbA, cfgA := instantPodIn(t, s, "ns-a", "a1")
	createVM(t, s, sbA, cfgA, vmConfig(1024, 200000, 100000))
	meta := readyTemplate(t, s)

	sbB, cfgB := instantPodIn(t, s, "ns-b", "b1")
	idB := createVM(t, s, sbB, cfgB, vmConfig(1024, 200000, 100000))
	if k := cloneOf(t, e, idB); k != "" {
		t.Fatalf("a pod of ns-b is a clone of template %s, made for ns-a", k)
	}
	if log := readLog(t, cfgB); !strings.Contains(log, "boots instead of starting from its template") {
		t.Fatalf("ns-b's pod's log does not say why it boots:\n%s", log)
	}
	noMaking(t, s)

	sbA2, cfgA2 := instantPodIn(t, s, "ns-a", "a2")
	if k := cloneOf(t, e, createVM(t, s, sbA2, cfgA2, vmConfig(1024, 200000, 100000))); k != meta.Key {
		t.Fatalf("a second pod of ns-a: clone of %q, want ns-a's template %s", k, meta.Key)
	}
}

// TestTemplateMetaMismatch: a template whose stored meta differs from
// the request in its image digest or its shape (a key collision, or a
// meta written by something else) is not restored: the pod boots.
func TestTemplateMetaMismatch(t *testing.T) {
	for name, change := range map[string]func(*template.Meta){
		"digest": func(m *template.Meta) { m.ImageDigest = "sha256:other" },
		"shape":  func(m *template.Meta) { m.Shape.MemoryMiB = 4096 },
	} {
		t.Run(name, func(t *testing.T) {
			e, s, _ := instantService(t)
			sb1, cfg1 := instantPodIn(t, s, "ns", "first")
			createVM(t, s, sb1, cfg1, vmConfig(1024, 200000, 100000))
			meta := readyTemplate(t, s)
			change(&meta)
			b, err := json.Marshal(meta)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(makerOf(s).Store.Paths(meta.Key).Meta, b, 0o600); err != nil {
				t.Fatal(err)
			}
			sb2, cfg2 := instantPodIn(t, s, "ns", "second")
			if k := cloneOf(t, e, createVM(t, s, sb2, cfg2, vmConfig(1024, 200000, 100000))); k != "" {
				t.Fatalf("a pod is a clone of template %s, whose meta says %s", k, name+" differs")
			}
			if log := readLog(t, cfg2); !strings.Contains(log, "boots instead of starting from its template") {
				t.Fatalf("the pod's log does not say why it boots:\n%s", log)
			}
		})
	}
}

// settleGate is a guest agent that holds every template's settling
// (the script run before its save) until opened, and counts how many
// are held at once.
type settleGate struct {
	guestAgent
	mu        sync.Mutex
	held, max int
	open      chan struct{}
}

func (g *settleGate) answer(cmd string) (string, error) {
	var req struct {
		Execute   string `json:"execute"`
		Arguments struct {
			InputData string `json:"input-data"`
		} `json:"arguments"`
	}
	_ = json.Unmarshal([]byte(cmd), &req)
	in, _ := base64.StdEncoding.DecodeString(req.Arguments.InputData)
	if req.Execute == "guest-exec" && strings.Contains(string(in), "cloud-init status --wait") {
		g.mu.Lock()
		g.held++
		g.max = max(g.max, g.held)
		g.mu.Unlock()
		<-g.open
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}
	return g.guestAgent.answer(cmd)
}

func (g *settleGate) counts() (held, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.max
}

// TestTemplateMakingsCapped: ten pods asking for templates of ten
// memory sizes make the node make no more than one at once (the default
// cap); the others boot, and say the node is making another template.
func TestTemplateMakingsCapped(t *testing.T) {
	e, s, _ := instantService(t)
	gate := &settleGate{open: make(chan struct{})}
	e.Libvirt.SetAgent(gate.answer)
	opened := false
	release := func() {
		if !opened {
			opened = true
			close(gate.open)
		}
	}
	defer func() { release(); noMaking(t, s) }()
	var cfgs []*runtimeapi.PodSandboxConfig
	for i := range 10 {
		sb, cfg := instantPodIn(t, s, "ns", fmt.Sprintf("p%d", i))
		createVM(t, s, sb, cfg, vmConfig(int64(512+64*i), 200000, 100000))
		cfgs = append(cfgs, cfg)
	}
	testutil.Eventually(t, 5*time.Second, "a template settling", func() error {
		if held, _ := gate.counts(); held == 0 {
			return fmt.Errorf("none held")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // room for any other making to reach its settling
	if _, most := gate.counts(); most > 1 {
		t.Fatalf("%d templates made at once, want at most 1", most)
	}
	if log := readLog(t, cfgs[9]); !strings.Contains(log, "making another template") {
		t.Fatalf("a pod beyond the cap: its log does not say the node is making another template:\n%s", log)
	}
	release()
	noMaking(t, s)
}

// TestTemplateSharedAcrossNamespaces: with the operator's opt-in
// (template_share_across_namespaces), ns-b's pod is a clone of the
// template ns-a's pod made.
func TestTemplateSharedAcrossNamespaces(t *testing.T) {
	e, s, _ := instantService(t)
	makerOf(s).ShareAcrossNamespaces = true
	sbA, cfgA := instantPodIn(t, s, "ns-a", "a1")
	createVM(t, s, sbA, cfgA, vmConfig(1024, 200000, 100000))
	meta := readyTemplate(t, s)
	if meta.Namespace != "" {
		t.Fatalf("a shared template names namespace %q", meta.Namespace)
	}
	sbB, cfgB := instantPodIn(t, s, "ns-b", "b1")
	if k := cloneOf(t, e, createVM(t, s, sbB, cfgB, vmConfig(1024, 200000, 100000))); k != meta.Key {
		t.Fatalf("ns-b's pod: clone of %q, want the shared template %s", k, meta.Key)
	}
}

// TestTemplateReplacedBeforeRestore: a clone planned from a template
// whose meta no longer is its request's when it starts (replaced since)
// is not restored from it: it boots, and says why.
func TestTemplateReplacedBeforeRestore(t *testing.T) {
	e, s, _ := instantService(t)
	sb1, cfg1 := instantPodIn(t, s, "ns", "first")
	createVM(t, s, sb1, cfg1, vmConfig(1024, 200000, 100000))
	meta := readyTemplate(t, s)
	sb2, cfg2 := instantPodIn(t, s, "ns", "second")
	id2 := createVM(t, s, sb2, cfg2, vmConfig(1024, 200000, 100000))
	if k := cloneOf(t, e, id2); k != meta.Key {
		t.Fatalf("the second pod: clone of %q, want %s", k, meta.Key)
	}
	meta.ImageDigest = "sha256:other"
	if err := makerOf(s).Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	startVM(t, s, id2)
	d, _ := e.Libvirt.Domain(vmDomain(t, e, id2))
	if string(d.Restored) != "" {
		t.Fatal("the clone was restored from a template that is not its own")
	}
	if log := readLog(t, cfg2); !strings.Contains(log, "the template at its key is another's") {
		t.Fatalf("the clone's log does not say why it boots:\n%s", log)
	}
}

func vmDomain(t *testing.T, e *coretest.Env, id string) string {
	t.Helper()
	c, err := e.R.Store.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c.Domain
}

// A template's VM identity is freed only once its cgroup is gone: while
// the cgroup still holds a process (one running as that uid), no pod is
// given it.
func TestTemplateIdentityHeldWhileItsCgroupHoldsAProcess(t *testing.T) {
	e, s, _ := instantServiceWith(t, coretest.Options{Identities: vmidentity.Range{Base: 700000, Count: 3}}) // 700001, 700002
	makerOf(s).CgroupRetry = 50 * time.Millisecond
	e.Cgroups.SetRemoveFail(errors.New("remove cgroup: device or resource busy (still holds pids 4242)"))
	sb1, cfg1 := instantPod(t, s, "first", instant.Handler, nil) // takes one identity, its template the other
	createVM(t, s, sb1, cfg1, vmConfig(1024, 200000, 100000))
	readyTemplate(t, s)
	noMaking(t, s)

	cfg2 := podConfig(t, "second")
	sb2 := runSandbox(t, s, cfg2, "vm")
	create := func() error {
		_, err := s.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb2, Config: vmConfig(1024, 200000, 100000), SandboxConfig: cfg2})
		return err
	}
	if err := create(); errdefs.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a VM while the template's cgroup holds a process: %v, want ResourceExhausted (its identity still taken)", err)
	}

	e.Cgroups.SetRemoveFail(nil)
	testutil.Eventually(t, 5*time.Second, "the template's identity freed once its cgroup went", create)
}

// TestTemplateMakingEndsWithItsPods: ten rounds of a vm-instant pod of a
// new size, made and removed, whose templates' guests never settle (no
// agent): at most the cap of templates is ever being made, and once each
// round's pod is stopped, its making is cancelled and leaves no
// template behind, not even a failed one.
func TestTemplateMakingEndsWithItsPods(t *testing.T) {
	_, s, agent := instantService(t)
	agent.mu.Lock()
	agent.fail = errAgentSilent
	agent.mu.Unlock()
	for i := range 10 {
		sb, cfg := instantPod(t, s, fmt.Sprintf("round-%d", i), instant.Handler, nil)
		createVM(t, s, sb, cfg, vmConfig(int64(512+64*i), 200000, 100000))
		all, err := makerOf(s).Store.List()
		if err != nil {
			t.Fatal(err)
		}
		if making := len(all); making > 1 {
			t.Fatalf("round %d: %d templates on the node while the cap of makings is 1: %+v", i, making, all)
		}
		for _, call := range []func() error{
			func() error {
				_, err := s.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb})
				return err
			},
			func() error {
				_, err := s.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb})
				return err
			},
		} {
			if err := call(); err != nil {
				t.Fatal(err)
			}
		}
		testutil.Eventually(t, 10*time.Second, "no template left once the round's pod is gone", func() error {
			all, err := makerOf(s).Store.List()
			if err == nil && len(all) > 0 {
				err = fmt.Errorf("templates %+v", all)
			}
			return err
		})
	}
}
