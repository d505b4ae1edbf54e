package libvirt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/fsusage"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/criservice"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmimage"
	"github.com/crimux/crimux/vmtypes"
)

// sampledRuntime is a runtime on coretest's fakes with templates on, a
// libvirtd connection that is never run (no libvirtd is asked) and the
// image cache of a containerd reader under its state dir.
func sampledRuntime(t *testing.T) (*Runtime, *coretest.Env) {
	t.Helper()
	e := coretest.New(t, coretest.Options{GuestBootTimeout: time.Millisecond})
	e.R.Boots.Every = time.Millisecond
	e.R.Images = vmImages{vmimage.NewReader(nil, nil, imageCacheDir(e.Dir))}
	conn, err := virt.NewConn("qemu:///system?socket="+filepath.Join(e.Dir, "no-libvirtd.sock"), coretest.Logger(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetAgentCaps(AgentCaps{PerVM: 2, PerNode: 5, Wait: time.Minute})
	rt := &Runtime{core: e.R, cri: criservice.New(e.R), conn: conn}
	c := instant.CoreOf(e.R)
	rt.instant = &instant.Room{R: c, Maker: &instant.Maker{R: c, Store: template.Store{Dir: filepath.Join(e.Dir, TemplatesDir)}}}
	return rt, e
}

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
}

// putTemplate records template key in state, with a disk of size bytes.
func putTemplate(t *testing.T, st template.Store, key, state string, size int) {
	t.Helper()
	if err := st.Create(template.Meta{Key: key}); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(template.Meta{Key: key, State: state}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, st.Paths(key).Disk, size)
}

// TestNodeSampleTemplates: the templates are counted by state, and their
// bytes added up, from the template store; a directory whose meta does
// not read counts failed, as ListTemplates lists it.
func TestNodeSampleTemplates(t *testing.T) {
	rt, _ := sampledRuntime(t)
	st := rt.instant.Maker.Store
	putTemplate(t, st, "0000000000000001", template.Ready, 1<<20)
	putTemplate(t, st, "0000000000000002", template.Ready, 2<<20)
	putTemplate(t, st, "0000000000000003", template.Making, 0)
	putTemplate(t, st, "0000000000000004", template.Failed, 0)
	if err := os.MkdirAll(st.Paths("0000000000000005").Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := rt.NodeSample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (vmtypes.TemplateCounts{Making: 1, Ready: 2, Failed: 2}); !s.TemplatesOn || s.Templates != want {
		t.Errorf("templates on %v, %+v; want on, %+v", s.TemplatesOn, s.Templates, want)
	}
	all, err := rt.instant.ListTemplates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, m := range all {
		want += m.SizeBytes
	}
	if s.TemplateBytes != want || s.TemplateBytes < 3<<20 {
		t.Errorf("template bytes %d; want %d, what ListTemplates shows (3 MiB and a bit)", s.TemplateBytes, want)
	}

	rt.instant.Maker = nil // libvirt.templates = false
	if s, err = rt.NodeSample(context.Background()); err != nil || s.TemplatesOn || s.Templates != (vmtypes.TemplateCounts{}) {
		t.Errorf("templates off: %+v, %v; want none", s, err)
	}
}

// TestNodeSampleImageCache: the cache's bytes as ImageFsUsage measures
// them, and its images (not an extraction in progress).
func TestNodeSampleImageCache(t *testing.T) {
	rt, e := sampledRuntime(t)
	cache := imageCacheDir(e.Dir)
	writeFile(t, filepath.Join(cache, "sha256-"+strings.Repeat("a", 64), "disk.qcow2"), 3<<20)
	writeFile(t, filepath.Join(cache, "sha256-"+strings.Repeat("b", 64), "vmlinuz"), 1<<20)
	writeFile(t, filepath.Join(cache, ".tmp-sha256-"+strings.Repeat("c", 64), "disk.qcow2"), 1<<20)
	s, err := rt.NodeSample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, err := fsusage.Measure(context.Background(), cache)
	if err != nil {
		t.Fatal(err)
	}
	if s.ImageCacheBytes != want.Bytes || s.ImageCacheBytes < 5<<20 || s.ImageCacheEntries != 2 {
		t.Errorf("image cache %d bytes, %d entries; want %d bytes, 2 entries", s.ImageCacheBytes, s.ImageCacheEntries, want.Bytes)
	}
}

// TestNodeSampleAgentsAndBoots: the agent slots taken and the caps in
// force, and the running VMs the boot watch reports stuck.
func TestNodeSampleAgentsAndBoots(t *testing.T) {
	rt, e := sampledRuntime(t)
	slots := rt.conn.AgentSlots()
	var releases []func()
	for _, d := range []string{"crimux-a", "crimux-a", "crimux-b"} {
		release, err := slots.Take(d)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	// A third call to crimux-a waits in line: its VM's cap is full.
	waited := make(chan error, 1)
	go func() {
		release, err := slots.Take("crimux-a")
		if err == nil {
			release()
		}
		waited <- err
	}()
	defer func() { // the releases let it through
		for _, release := range releases {
			release()
		}
		if err := <-waited; err != nil {
			t.Error(err)
		}
	}()
	coretest.WaitFor(t, "a call waiting for a slot", func() bool { return slots.Waiting() == 1 })
	e.PutPod(t, "p1", nil)
	e.PutVM(t, "p1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	e.PutPod(t, "p2", nil)
	e.PutVM(t, "p2", "c2", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	never := func() (string, bool) { return "", false }
	e.R.Boots.Watch("c1", time.Now().Add(-time.Minute), never)
	coretest.WaitFor(t, "c1 reported stuck", func() bool { _, stuck := e.R.Boots.Stuck("c1"); return stuck })

	s, err := rt.NodeSample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.AgentCallsInFlight != 3 || s.AgentCallsWaiting != 1 || s.AgentCapPerVM != 2 || s.AgentCapPerNode != 5 {
		t.Errorf("agent calls %d in flight, %d waiting, caps %d/%d; want 3, 1, 2/5",
			s.AgentCallsInFlight, s.AgentCallsWaiting, s.AgentCapPerVM, s.AgentCapPerNode)
	}
	if s.GuestBootsStuck != 1 {
		t.Errorf("%d guest boots stuck, want 1 (c1)", s.GuestBootsStuck)
	}
}
