package instant

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/resize"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/vmtypes"
)

// guest is a fake guest agent that runs nothing and keeps each script it
// was given (the stdin of guest-exec); fail, when set, is every answer.
type guest struct {
	mu      sync.Mutex
	scripts []string
	fail    error
}

func (g *guest) answer(cmd string) (string, error) {
	var req struct {
		Execute   string `json:"execute"`
		Arguments struct {
			InputData string `json:"input-data"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(cmd), &req); err != nil {
		return "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail != nil {
		return "", g.fail
	}
	switch req.Execute {
	case "guest-exec":
		in, _ := base64.StdEncoding.DecodeString(req.Arguments.InputData)
		g.scripts = append(g.scripts, string(in))
		return `{"return":{"pid":1}}`, nil
	case "guest-exec-status":
		return `{"return":{"exited":true,"exitcode":0}}`, nil
	}
	return `{"return":{}}`, nil
}

func (g *guest) last() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.scripts) == 0 {
		return ""
	}
	return g.scripts[len(g.scripts)-1]
}

// Every VM of these tests asks for 2 vCPUs and 1 GiB, and may grow as
// far as any VM of that size (resize.Headroom).
const (
	testVCPUs     = 2
	testMemoryMiB = 1024
	testImage     = "registry.example/vm:1"
)

// newRoom is a Room whose Maker makes templates on the fakes (no tap)
// from images with a disk.
func newRoom(t *testing.T, opts ...coretest.Options) (*Room, *coretest.Env, *guest) {
	t.Helper()
	e := coretest.New(t, opts...)
	e.Images.Layout = core.ImageLayout{Digest: "sha256:d1", DiskPath: "/images/d1/disk.qcow2", DiskFormat: "qcow2", DiskVirtualSize: 1 << 30}
	g := &guest{}
	e.Libvirt.SetAgent(g.answer)
	c := CoreOf(e.R)
	m := &Maker{R: c, Store: template.Store{Dir: filepath.Join(e.Dir, "templates")},
		NIC: func(string) (func(string) (*os.File, []string, error), func(), error) {
			return func(string) (*os.File, []string, error) { return nil, nil, nil }, func() {}, nil
		}}
	r := &Room{R: c, Maker: m}
	t.Cleanup(func() { waitIdle(t, m) })
	return r, e, g
}

// podAsk records pod id of namespace ns, asking for its template
// (RuntimeClass vm-instant), and the record of its VM about to be made,
// and is what the CRI face asks of the room for it.
func podAsk(t *testing.T, e *coretest.Env, id, ns string) Ask {
	t.Helper()
	sb := e.PutPod(t, id, func(sb *store.Sandbox) {
		sb.Handler, sb.Config.Metadata.Namespace, sb.Config.Hostname = Handler, ns, id+"-host"
	})
	maxVCPUs, maxMemoryMiB := resize.Headroom(&e.R.Opts, vm.Resources{VCPUs: testVCPUs, MemoryMiB: testMemoryMiB})
	c := &store.Container{ID: id + "-vm", SandboxID: sb.ID, Domain: vm.DomainName(id + "-vm"), Dir: e.R.VMDir(id + "-vm"),
		ImageRef: testImage, ImageDigest: e.Images.Layout.Digest, VCPUs: testVCPUs, MaxVCPUs: maxVCPUs,
		MemoryMiB: testMemoryMiB, MaxMemoryMiB: maxMemoryMiB, Accel: "tcg", State: runtimeapi.ContainerState_CONTAINER_CREATED,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"}}}
	return Ask{Pod: sb, VM: c, Layout: e.Images.Layout}
}

// warm makes the template of namespace ns's VMs, ready.
func warm(t *testing.T, r *Room, ns string) vmtypes.TemplateInfo {
	t.Helper()
	info, err := r.WarmTemplate(t.Context(), vmtypes.TemplateWarm{Namespace: ns, Image: testImage, VCPUs: testVCPUs, MemoryMiB: testMemoryMiB})
	if err != nil || info.State != template.Ready {
		t.Fatalf("warm %s: %+v, %v", ns, info, err)
	}
	return info
}

// TestPlanCloneColdReasons: a VM whose pod did not ask boots and says
// nothing; one that asked but that no template can hold boots, and says
// why.
func TestPlanCloneColdReasons(t *testing.T) {
	r, e, _ := newRoom(t)
	warm(t, r, "ns")
	for _, tc := range []struct {
		name string
		edit func(*Ask)
		why  string
	}{
		{"not asked", func(a *Ask) { a.Pod.Handler = "vm" }, ""},
		{"boot asked", func(a *Ask) { a.Opts.Start = vm.StartBoot }, ""},
		{"shares", func(a *Ask) { a.Storage.Shares = []vm.Share{{}} }, "virtio-fs shares"},
		{"devices", func(a *Ask) { a.Storage.Devices = []vm.BlockDevice{{}} }, "block volumes"},
		{"root volume", func(a *Ask) { a.RootVolume = true }, "a volume of its own"},
		{"huge pages", func(a *Ask) { a.HugePages = true }, "huge pages"},
		{"kernel", func(a *Ask) { a.Layout.Kernel = "/images/d1/vmlinuz" }, "a kernel of its own"},
		{"no disk", func(a *Ask) { a.Layout.DiskPath = "" }, "a kernel of its own"},
		{"kernel args", func(a *Ask) { a.Opts.KernelArgs = "quiet" }, "kernel arguments"},
		{"disk booted", func(a *Ask) { a.DiskBooted = true }, "has booted already"},
		{"no address", func(a *Ask) { a.Pod.Net.IP = "" }, "no network address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := podAsk(t, e, strings.ReplaceAll(tc.name, " ", "-"), "ns")
			tc.edit(&a)
			why := r.PlanClone(a)
			if tc.why == "" && why != "" || !strings.Contains(why, tc.why) || a.VM.Clone != nil {
				t.Fatalf("cold %q, clone %+v; want %q and no clone", why, a.VM.Clone, tc.why)
			}
		})
	}
	a := podAsk(t, e, "asked", "ns")
	a.Pod.Handler, a.Opts.Start = "vm", vm.StartTemplate
	if why := r.PlanClone(a); why != "" || a.VM.Clone == nil {
		t.Fatalf("a pod of handler vm asking crimux.io/start: template: cold %q, clone %+v", why, a.VM.Clone)
	}
}

// TestPlanCloneOfItsTemplate: the first VM of an image and shape starts
// its template's making and boots; the next while it is made boots too;
// once it is ready, the next is planned as its clone, of a UUID and a
// machine ID of its own; a failed template is made again only once its
// retry is due.
func TestPlanCloneOfItsTemplate(t *testing.T) {
	r, e, g := newRoom(t)
	g.mu.Lock()
	g.fail = errors.New("QEMU guest agent is not connected") // the making waits for its guest
	g.mu.Unlock()
	if why := r.PlanClone(podAsk(t, e, "first", "ns")); !strings.Contains(why, "is being made now") {
		t.Fatalf("the first VM: cold %q, want its template being made now", why)
	}
	// Its record is written in the background, after the plan returns.
	testutil.Eventually(t, 10*time.Second, "the template's record, making", func() error {
		if all, err := r.Maker.Store.List(); err != nil || len(all) != 1 || all[0].State != template.Making {
			return fmt.Errorf("templates %+v, %v", all, err)
		}
		return nil
	})
	if why := r.PlanClone(podAsk(t, e, "second", "ns")); !strings.Contains(why, "is still being made") {
		t.Fatalf("the second VM: cold %q, want its template still being made", why)
	}
	r.ForgetAsks("first")
	r.ForgetAsks("second") // no pod asks any more: the making is cancelled
	waitIdle(t, r.Maker)
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()

	info := warm(t, r, "ns")
	a := podAsk(t, e, "third", "ns")
	if why := r.PlanClone(a); why != "" || a.VM.Clone == nil || a.VM.Clone.Key != info.Key || a.VM.Clone.UUID == "" {
		t.Fatalf("once ready: cold %q, clone %+v; want a clone of %s", why, a.VM.Clone, info.Key)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a.VM.Clone.MachineID) {
		t.Fatalf("machine ID %q", a.VM.Clone.MachineID)
	}

	meta, err := r.Maker.Store.Get(info.Key)
	if err != nil {
		t.Fatal(err)
	}
	meta.State, meta.Error, meta.FailedAt = template.Failed, "no agent", time.Now().UnixNano()
	if err := r.Maker.Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	if why := r.PlanClone(podAsk(t, e, "fourth", "ns")); !strings.Contains(why, "failed: no agent (made again in") {
		t.Fatalf("a failed template: cold %q", why)
	}
	meta.FailedAt = time.Now().Add(-time.Hour).UnixNano()
	if err := r.Maker.Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	if why := r.PlanClone(podAsk(t, e, "fifth", "ns")); !strings.Contains(why, "is being made now") {
		t.Fatalf("a failed template whose retry is due: cold %q, want it made again", why)
	}
	waitIdle(t, r.Maker)
	meta.State, meta.ImageDigest = template.Ready, "sha256:other"
	if err := r.Maker.Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	if why := r.PlanClone(podAsk(t, e, "sixth", "ns")); !strings.Contains(why, "cannot be used") {
		t.Fatalf("another's template at the key: cold %q", why)
	}
}

// TestNoteCold: a VM that boots instead of starting from its template
// says why in its pod's events and is counted; one that did not ask says
// nothing.
func TestNoteCold(t *testing.T) {
	var notices notices
	r, e, _ := newRoom(t, coretest.Options{OnGuestBoot: notices.add})
	c := podAsk(t, e, "first", "ns").VM
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	r.NoteCold(c.ID, "")
	r.NoteCold(c.ID, "its template is being made")
	if n := e.Counters.Events("template_clone " + vmcounters.CloneBooted); n != 1 {
		t.Fatalf("%d booted clones counted, want 1", n)
	}
	notices.mu.Lock()
	defer notices.mu.Unlock()
	if n := notices.all; len(n) != 1 || n[0].Reason != ReasonBootedCold || n[0].Message != coldMessagePrefix+"its template is being made" ||
		n[0].Pod.GetName() != "first" {
		t.Fatalf("notices %+v, want one of the first pod's VM booting cold", n)
	}
}

// notices are what the pods' events were told (core.Options.OnGuestBoot).
type notices struct {
	mu  sync.Mutex
	all []bootwatch.GuestBoot
}

func (n *notices) add(b bootwatch.GuestBoot) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = append(n.all, b)
}

func (n *notices) last() bootwatch.GuestBoot {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.all) == 0 {
		return bootwatch.GuestBoot{}
	}
	return n.all[len(n.all)-1]
}

// cloneOf makes a's VM as CreateContainer makes a clone: its directory,
// its copy of its template's disk, its domain defined from its
// template's.
func cloneOf(t *testing.T, r *Room, e *coretest.Env, a Ask) *store.Container {
	t.Helper()
	c := a.VM
	if why := r.PlanClone(a); why != "" {
		t.Fatalf("not a clone: %s", why)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(c.Dir, "disk.qcow2")
	if err := r.CopyDisk(c, disk); err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec{Name: c.Domain, Meta: vm.Metadata{Instance: "i", SandboxID: c.SandboxID, ContainerID: c.ID},
		CIData: filepath.Join(c.Dir, cidata.File), Disk: &vm.Disk{Path: disk, Format: "qcow2"},
		Console: vm.Console{Socket: vmfiles.ConsoleSocket(c.Dir), Log: filepath.Join(c.Dir, vmfiles.ConsoleLogFile)}}
	xml, err := r.CloneXML(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Libvirt.Define(xml); err != nil {
		t.Fatal(err)
	}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStartClone: a clone's first start restores its template's state
// through a FIFO and makes it itself (its clock, its RNG, its NIC,
// hostname and machine ID its pod's), and is counted restored.
func TestStartClone(t *testing.T) {
	r, e, g := newRoom(t)
	info := warm(t, r, "ns")
	c := cloneOf(t, r, e, podAsk(t, e, "first", "ns"))
	restored, err := r.StartClone(t.Context(), e.Libvirt, c, func() error { return errors.New("booted") })
	if err != nil || !restored {
		t.Fatalf("restored %v, %v", restored, err)
	}
	d, _ := e.Libvirt.Domain(c.Domain)
	if string(d.Restored) == "" || d.GuestTime.IsZero() {
		t.Fatalf("the clone was not restored from the template's stream (%q) or its clock not set (%v)", d.Restored, d.GuestTime)
	}
	for _, want := range []string{"echo first-host >/proc/sys/kernel/hostname", c.Clone.MachineID, TemplateMAC(info.Key), "10.1.0.5/24"} {
		if !strings.Contains(g.last(), want) {
			t.Errorf("the clone's identity script lacks %q:\n%s", want, g.last())
		}
	}
	if n := e.Counters.Events("template_clone " + vmcounters.CloneRestored); n != 1 {
		t.Fatalf("%d clones counted restored, want 1", n)
	}
}

// TestStartCloneBoots: a clone whose restore fails, or whose template
// is no longer its own (replaced since its plan), boots instead, its
// next start a boot too; one restored whose guest does not become itself
// is destroyed and fails; with templates off, a clone boots.
func TestStartCloneBoots(t *testing.T) {
	var notices notices
	r, e, g := newRoom(t, coretest.Options{OnGuestBoot: notices.add})
	info := warm(t, r, "ns")
	booted := 0
	boot := func() error { booted++; return nil }
	c := cloneOf(t, r, e, podAsk(t, e, "first", "ns"))
	e.Libvirt.Fail("RestoreState", errors.New("boom"))
	if restored, err := r.StartClone(t.Context(), e.Libvirt, c, boot); err != nil || restored || booted != 1 {
		t.Fatalf("a failed restore: restored %v, %v, %d boots", restored, err, booted)
	}
	if rec, _ := e.R.Store.Container(c.ID); rec.Clone != nil {
		t.Fatal("a clone whose restore failed is a clone still")
	}

	c = cloneOf(t, r, e, podAsk(t, e, "replaced", "ns"))
	meta, err := r.Maker.Store.Get(info.Key)
	if err != nil {
		t.Fatal(err)
	}
	mine := meta
	meta.ImageDigest = "sha256:other"
	if err := r.Maker.Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	if restored, err := r.StartClone(t.Context(), e.Libvirt, c, boot); err != nil || restored || booted != 2 {
		t.Fatalf("a clone of a replaced template: restored %v, %v, %d boots", restored, err, booted)
	}
	if d, _ := e.Libvirt.Domain(c.Domain); string(d.Restored) != "" {
		t.Fatal("the clone was restored from a template that is not its own")
	}
	if n := notices.last(); n.Reason != ReasonBootedCold || !strings.Contains(n.Message, "the template at its key is another's") {
		t.Fatalf("the clone's notice %+v does not say why it boots", n)
	}
	if err := r.Maker.Store.Put(mine); err != nil {
		t.Fatal(err)
	}

	c = cloneOf(t, r, e, podAsk(t, e, "second", "ns"))
	g.mu.Lock()
	g.fail = errors.New("QEMU guest agent is not connected")
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if restored, err := r.StartClone(ctx, e.Libvirt, c, boot); err == nil || restored || booted != 2 {
		t.Fatalf("a clone not made itself: restored %v, %v, %d boots", restored, err, booted)
	}
	if rec, _ := e.R.Store.Container(c.ID); rec.Clone != nil {
		t.Fatal("a clone not made itself is a clone still: its next start would restore it again")
	}
	if n := e.Counters.Events("template_clone " + vmcounters.CloneBooted); n != 3 {
		t.Fatalf("%d clones counted booted, want 3", n)
	}

	r.Maker = nil
	if restored, err := r.StartClone(t.Context(), e.Libvirt, &store.Container{Clone: &store.Clone{Key: "k"}}, boot); err != nil || restored || booted != 3 {
		t.Fatalf("templates off: restored %v, %v, %d boots", restored, err, booted)
	}
}

// TestCloneXMLNamesItsOwn: a clone's domain is its template's with its
// own name, UUID, disk, cloud-init volume and console.
func TestCloneXMLNamesItsOwn(t *testing.T) {
	r, e, _ := newRoom(t)
	warm(t, r, "ns")
	c := cloneOf(t, r, e, podAsk(t, e, "first", "ns"))
	d, ok := e.Libvirt.Domain(c.Domain)
	if !ok {
		t.Fatalf("no domain %s", c.Domain)
	}
	for _, want := range []string{c.Clone.UUID, filepath.Join(c.Dir, "disk.qcow2"), filepath.Join(c.Dir, cidata.File), vmfiles.ConsoleSocket(c.Dir)} {
		if !strings.Contains(d.XML, want) {
			t.Errorf("the clone's domain lacks %s", want)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.Dir, "disk.qcow2")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the clone's copy of its template's disk: %v, %v", fi, err)
	}
}
