package rebuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildLeavesAloneWhatItCannotProve: a VM pod whose domain,
// directories and record copies do not all agree is reported with why and
// left as it is, files and domain alike, beside one rebuilt.
func TestRebuildLeavesAloneWhatItCannotProve(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(t *testing.T, f *fixture, p pod, s *vm.Spec)
		why  string
	}{
		"no crimux metadata":     {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta = vm.Metadata{} }, "no crimux metadata"},
		"another identity":       {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta.Instance = "crimux-other" }, `another crimux identity, "crimux-other"`},
		"IDs crimux never mints": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta.SandboxID = "../../etc" }, "IDs crimux never mints"},
		"no VM record copy": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			os.Remove(store.ContainerCopyPath(p.vmDir()))
		}, "holds no record copy (container.json)"},
		"no VM directory": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { os.RemoveAll(p.vmDir()) }, "directory " + "<vm>" + " does not exist"},
		"no pod record copy": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			os.Remove(store.SandboxCopyPath(f.state, p.sb.ID))
		}, "holds no record copy (sandbox.json)"},
		"a VM copy of a newer format": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			writeFile(t, store.ContainerCopyPath(p.vmDir()), `{"format": 99, "record": {}}`)
		}, "written by a newer crimux"},
		"an unreadable VM copy": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			writeFile(t, store.ContainerCopyPath(p.vmDir()), `{"format": 3, "rec`)
		}, "record copy cannot be used"},
		"another pod's name":       {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta.PodName = "other" }, "the domain's metadata says ns/other"},
		"another pod's uid":        {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta.PodUID = "other-uid" }, "(uid other-uid)"},
		"another pod sandbox's ID": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Meta.SandboxID = core.NewID() }, "its VM's record copy is container"},
		"another VM's file": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			s.CIData = filepath.Join(f.state, vmsDir, core.NewID(), cidata.File)
		}, "a file of another VM or pod"},
		"no file of its directory": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			s.CIData, s.Console = "", vm.Console{Socket: "/run/x.sock", Log: "/var/log/x.log"}
		}, "no file of its VM's directory"},
		"another root disk": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) {
			s.Disk.Path = filepath.Join(f.state, podsDir, p.sb.ID, "other.qcow2")
		}, "which the domain does not use"},
		"another identity's uid": {func(t *testing.T, f *fixture, p pod, s *vm.Spec) { s.Identity.UID++ }, "the domain runs as"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			good := f.vmPod(t, "good", true, nil)
			var bad pod
			bad = f.vmPod(t, "bad", true, func(p pod, s *vm.Spec) { bad = p; tc.edit(t, f, p, s) })
			f.damage(t)
			before := tree(t, f.state)
			rep, err := f.run(t, false)
			if err != nil {
				t.Fatal(err)
			}
			l := requireLeftAlone(t, rep, "domain", bad.c.Domain, strings.ReplaceAll(tc.why, "<vm>", bad.vmDir()))
			foreign := name == "no crimux metadata" || name == "another identity" || name == "IDs crimux never mints"
			if want := map[bool]string{true: thenForeign, false: thenAdopted}[foreign]; l.Then != want {
				t.Fatalf("then %q, want %q", l.Then, want)
			}
			if len(rep.Containers) != 1 || rep.Containers[0].ID != good.c.ID {
				t.Fatalf("rebuilt %+v, want %s alone", rep.Containers, good.c.ID)
			}
			requireUntouched(t, before, tree(t, f.state), good)
			if _, ok := f.lv.Domain(bad.c.Domain); !ok {
				t.Fatal("the domain left alone is gone")
			}
		})
	}
}

// TestRebuildReportsLoneDirectories: a VM directory without a domain and
// a pod directory of no domain are reported and kept.
func TestRebuildReportsLoneDirectories(t *testing.T) {
	f := newFixture(t)
	f.vmPod(t, "good", true, nil)
	gone := f.vmPod(t, "gone", true, nil)
	f.st.FlushCopies()
	if err := f.lv.Destroy(mustLookup(t, f, gone.c.Domain)); err != nil {
		t.Fatal(err)
	}
	if err := f.lv.Undefine(mustLookup(t, f, gone.c.Domain)); err != nil {
		t.Fatal(err)
	}
	f.damage(t)
	rep, err := f.run(t, false)
	if err != nil {
		t.Fatal(err)
	}
	if l := requireLeftAlone(t, rep, "vm-dir", gone.vmDir(), "libvirt has no domain "+gone.c.Domain); l.Then != thenRemoved {
		t.Fatalf("then %q", l.Then)
	}
	requireLeftAlone(t, rep, "pod-dir", filepath.Join(f.state, podsDir, gone.sb.ID), "no libvirt domain is of this pod")
	if _, err := os.Stat(store.ContainerCopyPath(gone.vmDir())); err != nil {
		t.Fatalf("the lone VM directory's copy: %v", err)
	}
}

func mustLookup(t *testing.T, f *fixture, name string) (d virt.Domain) {
	t.Helper()
	d, err := f.lv.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func requireLeftAlone(t *testing.T, rep *Report, kind, name, why string) LeftAlone {
	t.Helper()
	for _, l := range rep.LeftAlone {
		if l.Kind == kind && l.Name == name {
			if !strings.Contains(l.Why, why) || l.Then == "" {
				t.Fatalf("%s %s left alone because %q (then %q), want %q", kind, name, l.Why, l.Then, why)
			}
			return l
		}
	}
	t.Fatalf("%s %s not reported left alone: %+v", kind, name, rep.LeftAlone)
	return LeftAlone{}
}

// requireUntouched fails when a file of the state dir changed but the
// copies of the rebuilt pod (written again with its records).
func requireUntouched(t *testing.T, before, after map[string]string, rebuilt pod) {
	t.Helper()
	for p, sum := range before {
		if strings.Contains(p, rebuilt.sb.ID) || strings.Contains(p, rebuilt.c.ID) {
			continue
		}
		if after[p] != sum {
			t.Errorf("%s changed or went", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}
