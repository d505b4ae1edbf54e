package snapcarry_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/snapcarry"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

type env struct {
	k snapcarry.Carrier
	l *virtfake.Libvirt
}

func newEnv(t *testing.T) *env {
	t.Helper()
	state := t.TempDir()
	st, err := store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{k: snapcarry.Carrier{StateDir: state, Store: st}, l: virtfake.New()}
	if err := st.PutSandbox(&store.Sandbox{ID: "sb", Disk: &store.PodDisk{Path: filepath.Join(vmfiles.PodDir(state, "sb"), vmfiles.DiskFile)}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// vm records VM id of pod sb, made at created, and defines its domain.
func (e *env) vm(t *testing.T, id string, created int64) (*store.Container, virt.Domain) {
	t.Helper()
	c := &store.Container{ID: id, SandboxID: "sb", Domain: vm.DomainName(id), Dir: filepath.Join(e.k.StateDir, "vms", id), CreatedAt: created}
	if err := e.k.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	dom, err := e.l.Define("<domain type='kvm'><name>" + c.Domain + "</name></domain>")
	if err != nil {
		t.Fatal(err)
	}
	return c, dom
}

func (e *env) snapshot(t *testing.T, dom virt.Domain, name string) {
	t.Helper()
	if _, err := e.l.CreateSnapshot(dom, "<domainsnapshot><name>"+name+"</name></domainsnapshot>"); err != nil {
		t.Fatal(err)
	}
}

// snapshots lists dom's snapshots, the current one starred.
func (e *env) snapshots(t *testing.T, dom virt.Domain) string {
	t.Helper()
	list, err := e.l.ListSnapshots(dom)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list {
		cur, _ := e.l.IsCurrentSnapshot(s)
		out = append(out, s.Name+map[bool]string{true: "*"}[cur])
	}
	return strings.Join(out, ",")
}

// TestSaveAndCarry: the snapshots saved from a pod's VM are redefined on
// its next VM's domain, oldest first, the current one current, each with
// the new domain's definition inside.
func TestSaveAndCarry(t *testing.T) {
	e := newEnv(t)
	first, dom1 := e.vm(t, "a", 1)
	e.snapshot(t, dom1, "s1")
	e.snapshot(t, dom1, "s2")
	e.snapshot(t, dom1, "s3")
	if err := e.k.Save(e.l, first); err != nil {
		t.Fatal(err)
	}
	_, dom2 := e.vm(t, "b", 2)
	n, err := e.k.Carry(e.l, dom2, "sb")
	if err != nil || n != 3 {
		t.Fatalf("carried %d, %v; want 3", n, err)
	}
	if got := e.snapshots(t, dom2); got != "s1,s2,s3*" {
		t.Fatalf("snapshots of the next VM: %q, want s1,s2,s3*", got)
	}
	list, _ := e.l.ListSnapshots(dom2)
	doc, err := e.l.SnapshotXML(list[0])
	if err != nil || !strings.Contains(doc, "<name>"+dom2.Name+"</name>") {
		t.Fatalf("carried snapshot without its new domain: %s (%v)", doc, err)
	}
	if err := e.k.Forget("sb"); err != nil {
		t.Fatal(err)
	}
	_, dom3 := e.vm(t, "c", 3)
	if n, err := e.k.Carry(e.l, dom3, "sb"); err != nil || n != 0 {
		t.Fatalf("carried %d, %v after Forget; want none", n, err)
	}
}

// TestSaveReplaces: a save replaces what was saved before; a domain that
// is gone has nothing to save and keeps what was saved.
func TestSaveReplaces(t *testing.T) {
	e := newEnv(t)
	c, dom := e.vm(t, "a", 1)
	e.snapshot(t, dom, "old")
	if err := e.k.Save(e.l, c); err != nil {
		t.Fatal(err)
	}
	if err := e.l.DeleteSnapshot(virt.Snapshot{Name: "old", Domain: dom}); err != nil {
		t.Fatal(err)
	}
	e.snapshot(t, dom, "new")
	if err := e.k.Save(e.l, c); err != nil {
		t.Fatal(err)
	}
	gone := &store.Container{ID: "x", SandboxID: "sb", Domain: vm.DomainName("x")}
	if err := e.k.Save(e.l, gone); err != nil {
		t.Fatalf("save of a gone domain: %v", err)
	}
	_, next := e.vm(t, "b", 2)
	if _, err := e.k.Carry(e.l, next, "sb"); err != nil {
		t.Fatal(err)
	}
	if got := e.snapshots(t, next); got != "new*" {
		t.Fatalf("snapshots: %q, want new*", got)
	}
}

// TestKeep: a going VM's snapshots are kept only when its pod lives on
// with its root disk and it is the pod's newest VM.
func TestKeep(t *testing.T) {
	e := newEnv(t)
	older, domOld := e.vm(t, "a", 1)
	newest, domNew := e.vm(t, "b", 2)
	e.snapshot(t, domOld, "stale")
	e.snapshot(t, domNew, "s1")
	saved := filepath.Join(vmfiles.PodDir(e.k.StateDir, "sb"), "snapshots")
	if err := e.k.Keep(e.l, older); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Fatalf("an older VM's snapshots were kept: %v", err)
	}
	if vm, err := e.k.NewestVMOf("sb", ""); err != nil || vm.ID != newest.ID {
		t.Fatalf("newest VM %v, %v; want %s", vm, err, newest.ID)
	}
	if vm, err := e.k.NewestVMOf("sb", newest.ID); err != nil || vm.ID != older.ID {
		t.Fatalf("newest VM but %s: %v, %v; want %s", newest.ID, vm, err, older.ID)
	}
	sb, _ := e.k.Store.Sandbox("sb")
	sb.Removing = true
	if err := e.k.Store.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Keep(e.l, newest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Fatalf("the snapshots of a pod being removed were kept: %v", err)
	}
	sb.Removing = false
	if err := e.k.Store.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Keep(e.l, newest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(saved, "s1.xml")); err != nil {
		t.Fatalf("the newest VM's snapshots were not kept: %v", err)
	}
}

// TestCarryRefusesABadSave: a saved snapshot that is no snapshot's XML
// is an error, naming it.
func TestCarryRefusesABadSave(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(vmfiles.PodDir(e.k.StateDir, "sb"), "snapshots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.xml"), []byte("<nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, dom := e.vm(t, "a", 1)
	if _, err := e.k.Carry(e.l, dom, "sb"); err == nil || !strings.Contains(err.Error(), "bad.xml") {
		t.Fatalf("carry of a bad save: %v", err)
	}
}
