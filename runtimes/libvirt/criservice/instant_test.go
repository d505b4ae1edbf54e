package criservice

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// guestAgent is a fake guest agent that runs nothing and keeps each
// script it was given (the stdin of guest-exec).
type guestAgent struct {
	mu      sync.Mutex
	scripts []string
	// fail, when set, is every answer: an agent that is not there.
	fail error
	// silent is how many calls more fail before it answers (an agent
	// whose channel reconnects).
	silent int
}

var errAgentSilent = errors.New("QEMU guest agent is not connected")

func (a *guestAgent) answer(cmd string) (string, error) {
	var req struct {
		Execute   string `json:"execute"`
		Arguments struct {
			InputData string `json:"input-data"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(cmd), &req); err != nil {
		return "", err
	}
	a.mu.Lock()
	fail := a.fail
	if a.silent > 0 {
		a.silent--
		fail = errAgentSilent
	}
	a.mu.Unlock()
	if fail != nil {
		return "", fail
	}
	switch req.Execute {
	case "guest-exec":
		in, _ := base64.StdEncoding.DecodeString(req.Arguments.InputData)
		a.mu.Lock()
		a.scripts = append(a.scripts, string(in))
		a.mu.Unlock()
		return `{"return":{"pid":1}}`, nil
	case "guest-exec-status":
		return `{"return":{"exited":true,"exitcode":0}}`, nil
	}
	return `{"return":{}}`, nil
}

func (a *guestAgent) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.scripts) == 0 {
		return ""
	}
	return a.scripts[len(a.scripts)-1]
}

// instantService is a Service whose images have a disk and whose
// templates are made on the fakes (no tap).
func instantService(t *testing.T) (*coretest.Env, *Service, *guestAgent) {
	return instantServiceWith(t, coretest.Options{})
}

// instantServiceWith is instantService on fakes made with opts.
func instantServiceWith(t *testing.T, opts coretest.Options) (*coretest.Env, *Service, *guestAgent) {
	e := coretest.New(t, opts)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:d1", DiskPath: "/images/d1/disk.qcow2", DiskFormat: "qcow2", DiskVirtualSize: 1 << 30}
	agent := &guestAgent{}
	e.Libvirt.SetAgent(agent.answer)
	s := serviceOn(e)
	c := instant.CoreOf(e.R)
	m := &instant.Maker{R: c, Store: template.Store{Dir: filepath.Join(e.Dir, "templates")},
		NIC: func(string) (func(string) (*os.File, []string, error), func(), error) {
			return func(string) (*os.File, []string, error) { return nil, nil, nil }, func() {}, nil
		}}
	s.Clones = &instant.Room{R: c, Maker: m}
	return e, s, agent
}

// makerOf is the Maker of s's templates (instantService's).
func makerOf(s *Service) *instant.Maker { return s.Clones.(*instant.Room).Maker }

func instantPod(t *testing.T, s *Service, name, handler string, annotations map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := podConfig(t, name)
	cfg.Hostname, cfg.Annotations = name+"-host", annotations
	resp, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PodSandboxId, cfg
}

// TestInstantStart: the first VM pod asking for its template boots and
// starts its making, saying why in its log; once it is ready, the next is
// restored from it (a domain of its own, the template's state through a
// FIFO) and made itself before StartContainer returns: its clock set, its
// RNG reseeded, its NIC, hostname and machine ID its pod's. A pod that did
// not ask boots.
func TestInstantStart(t *testing.T) {
	e, s, agent := instantService(t)
	sb1, cfg1 := instantPod(t, s, "first", instant.Handler, nil)
	id1 := createVM(t, s, sb1, cfg1, vmConfig(1024, 200000, 100000))
	if c, _ := e.R.Store.Container(id1); c.Clone != nil {
		t.Fatalf("the first pod's VM is a clone of %s: no template was ready", c.Clone.Key)
	}
	if log := readLog(t, cfg1); !strings.Contains(log, "boots instead of starting from its template") || !strings.Contains(log, "being made now") {
		t.Fatalf("the first pod's log does not say why it boots:\n%s", log)
	}
	var meta template.Meta
	testutil.Eventually(t, 10*time.Second, "the template made", func() error {
		all, err := makerOf(s).Store.List()
		if err != nil || len(all) != 1 || all[0].State != template.Ready {
			return fmt.Errorf("templates %+v, %v", all, err)
		}
		meta = all[0]
		return nil
	})
	if !strings.Contains(agent.scripts[0], "cloud-init status --wait") {
		t.Fatalf("the template was not settled before its save: %q", agent.scripts[0])
	}
	if _, err := e.Libvirt.Lookup(template.Domain(meta.Key)); err == nil {
		t.Fatal("the template's domain is still defined")
	}
	if meta.Shape.VCPUs != 2 || meta.Shape.MemoryMiB != 1024 {
		t.Fatalf("template shape %s, want the pod's (2 vCPUs, 1024 MiB)", meta.Shape)
	}

	sb2, cfg2 := instantPod(t, s, "second", "vm", map[string]string{"crimux.io/start": "template"})
	id2 := createVM(t, s, sb2, cfg2, vmConfig(1024, 200000, 100000))
	c2, _ := e.R.Store.Container(id2)
	if c2.Clone == nil || c2.Clone.Key != meta.Key {
		t.Fatalf("the second pod's VM is no clone of template %s: %+v", meta.Key, c2.Clone)
	}
	startVM(t, s, id2)
	d, _ := e.Libvirt.Domain(c2.Domain)
	if string(d.Restored) == "" || d.GuestTime.IsZero() {
		t.Fatalf("the clone was not restored from the template's stream (%q) or its clock not set (%v)", d.Restored, d.GuestTime)
	}
	script := agent.last()
	for _, want := range []string{"0x5207", "echo second-host >/proc/sys/kernel/hostname", c2.Clone.MachineID, instant.TemplateMAC(meta.Key), "address 52:54:00:00:00:01", "10.1.0.5/24"} {
		if !strings.Contains(script, want) {
			t.Errorf("the clone's identity script lacks %q:\n%s", want, script)
		}
	}
	if st := status(t, s, id2); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("clone state %s", st.State)
	}
	if log := readLog(t, cfg2); !strings.Contains(log, "restored from template "+meta.Key) {
		t.Fatalf("the clone's log does not say it was restored:\n%s", log)
	}

	sb3, cfg3 := instantPod(t, s, "third", "vm", nil)
	id3 := createVM(t, s, sb3, cfg3, vmConfig(1024, 200000, 100000))
	if c3, _ := e.R.Store.Container(id3); c3.Clone != nil || strings.Contains(readLog(t, cfg3), "template") {
		t.Fatalf("a pod that did not ask for its template: clone %+v", c3.Clone)
	}
}

// TestInstantColdReasons: what a template cannot hold boots, and says so.
func TestInstantColdReasons(t *testing.T) {
	_, s, _ := instantService(t)
	sb, cfg := instantPod(t, s, "shares", instant.Handler, nil)
	vc := vmConfig(1024, 200000, 100000)
	vc.Mounts = []*runtimeapi.Mount{{ContainerPath: "/srv/data", HostPath: t.TempDir()}}
	createVM(t, s, sb, cfg, vc)
	if log := readLog(t, cfg); !strings.Contains(log, "virtio-fs shares") {
		t.Fatalf("a pod with a share: its log does not say why it boots:\n%s", log)
	}
	sb, cfg = instantPod(t, s, "args", instant.Handler, map[string]string{"crimux.io/kernel-args": "quiet"})
	createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000))
	if log := readLog(t, cfg); !strings.Contains(log, "kernel arguments") {
		t.Fatalf("a pod with kernel arguments: its log does not say why it boots:\n%s", log)
	}
	if _, err := vm.ParseAnnotations(map[string]string{"crimux.io/start": "fast"}, nil); err == nil {
		t.Fatal("crimux.io/start: fast accepted")
	}
}

func readLog(t *testing.T, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(cfg.LogDirectory, "vm", "0.log"))
	return string(b)
}

// TestNoClones: a CRI face given no templates' room starts every VM by
// booting it, one that asked for its template too, and says nothing of
// templates.
func TestNoClones(t *testing.T) {
	e := coretest.New(t)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:d1", DiskPath: "/images/d1/disk.qcow2", DiskFormat: "qcow2", DiskVirtualSize: 1 << 30}
	s := serviceOn(e)
	sb, cfg := instantPod(t, s, "first", instant.Handler, nil)
	id := createVM(t, s, sb, cfg, vmConfig(1024, 200000, 100000))
	if c, _ := e.R.Store.Container(id); c.Clone != nil {
		t.Fatalf("a clone of %s with no templates' room", c.Clone.Key)
	}
	startVM(t, s, id)
	if st := status(t, s, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("VM state %s", st.State)
	}
	if log := readLog(t, cfg); strings.Contains(log, "template") {
		t.Fatalf("the pod's log speaks of templates:\n%s", log)
	}
	if _, err := s.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	c := &store.Container{Clone: &store.Clone{Key: "0000000000000001"}}
	if err := s.clones().CopyDisk(c, filepath.Join(t.TempDir(), "disk")); err == nil {
		t.Error("a clone's disk copied with no templates' room")
	}
	if _, err := s.clones().CloneXML(c, vm.Spec{}); err == nil {
		t.Error("a clone's domain made with no templates' room")
	}
	booted := false
	if restored, err := s.clones().StartClone(t.Context(), e.Libvirt, c, func() error { booted = true; return nil }); restored || err != nil || !booted {
		t.Errorf("a clone started with no templates' room: restored %v, %v, booted %v", restored, err, booted)
	}
}
