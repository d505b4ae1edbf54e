package rebuild

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

const instance = "crimux-0123456789abcdef"

// fixture is a state dir and a libvirtd as crimux left them: records
// (with their copies) written through the store, VM directories, domains.
type fixture struct {
	state string
	lv    *virtfake.Libvirt
	st    *store.Store
	uid   uint32
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	state := t.TempDir()
	if err := os.Mkdir(filepath.Join(state, vmsDir), 0o711); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fixture{state: state, lv: virtfake.New(), st: st, uid: 1879048193}
}

// pod is one VM pod of a fixture.
type pod struct {
	sb *store.Sandbox
	c  *store.Container
}

func (p pod) vmDir() string { return p.c.Dir }

// vmPod makes what crimux makes for a VM pod whose VM runs (or, with
// running false, has exited): its records, its VM's directory and its
// domain, from the spec crimux would build (edit changes it first).
func (f *fixture) vmPod(t *testing.T, name string, running bool, edit func(p pod, s *vm.Spec)) pod {
	t.Helper()
	sid, cid := core.NewID(), core.NewID()
	f.uid++
	p := pod{sb: &store.Sandbox{ID: sid, Handler: "vm", CreatedAt: 1, State: runtimeapi.PodSandboxState_SANDBOX_READY, ContainerID: cid,
		Config: &runtimeapi.PodSandboxConfig{
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name + "-uid", Attempt: 1},
			Labels:      map[string]string{"io.kubernetes.pod.name": name},
			Annotations: map[string]string{"kubernetes.io/config.seen": "now"},
			Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/" + name}},
		Net:      &podnet.Attachment{NetNS: "/run/crimux/netns/" + instance + "_" + sid, Conf: []byte(`{"name":"n"}`)},
		Disk:     &store.PodDisk{Path: filepath.Join(f.state, podsDir, sid, vmfiles.DiskFile), ImageDigest: "sha256:aa"},
		Identity: &store.VMIdentity{UID: f.uid, GID: f.uid}}}
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if running {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	p.c = &store.Container{ID: cid, SandboxID: sid, Domain: vm.DomainName(cid), Dir: filepath.Join(f.state, vmsDir, cid),
		ImageRef: "img", ImageDigest: "sha256:aa", VCPUs: 2, MemoryMiB: 256, Accel: "tcg", CreatedAt: 2, StartedAt: 3,
		State: state, CgroupParent: "/kubepods/" + name,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm", Attempt: 2},
			Labels: map[string]string{"io.kubernetes.container.name": "vm"}}}
	if err := os.Mkdir(p.c.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := f.st.PutSandbox(p.sb); err != nil {
		t.Fatal(err)
	}
	if err := f.st.PutContainer(p.c); err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec{Name: p.c.Domain, Meta: vm.Metadata{Instance: instance, PodUID: name + "-uid", PodName: name, PodNamespace: "ns",
		SandboxID: sid, ContainerID: cid}, VCPUs: 2, MemoryMiB: 256, Accel: "tcg", Emulator: "/usr/bin/qemu-system-x86_64",
		Disk:     &vm.Disk{Path: p.sb.Disk.Path, Format: "qcow2"},
		Console:  vm.Console{Socket: vmfiles.ConsoleSocket(p.c.Dir), Log: filepath.Join(p.c.Dir, vmfiles.ConsoleLogFile)},
		CIData:   filepath.Join(p.c.Dir, cidata.File),
		Identity: &vm.Identity{UID: f.uid, GID: f.uid}}
	if edit != nil {
		f.st.FlushCopies()
		edit(p, &spec)
	}
	f.define(t, spec, running)
	return p
}

func (f *fixture) define(t *testing.T, spec vm.Spec, running bool) {
	t.Helper()
	x, err := vm.DomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := f.lv.Define(x)
	if err != nil {
		t.Fatal(err)
	}
	if running {
		if err := f.lv.Start(dom); err != nil {
			t.Fatal(err)
		}
	}
}

// damage closes the store and cuts it short, as a full disk would.
func (f *fixture) damage(t *testing.T) {
	t.Helper()
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.storePath(), 1000); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) storePath() string { return filepath.Join(f.state, store.FileName) }

func (f *fixture) run(t *testing.T, dry bool) (*Report, error) {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) }
	return Run(Options{StateDir: f.state, Instance: instance, DryRun: dry, Now: now}, f.lv)
}

// tree sums every file under the state dir but the stores: what a
// rebuild must leave as it was.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), store.FileName) {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = fmt.Sprintf("%x", sha256.Sum256(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setFormat marks the store at path with format v, as a newer crimux would.
func setFormat(t *testing.T, path, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("format"), []byte(v))
	})
	if err != nil {
		t.Fatal(err)
	}
}
