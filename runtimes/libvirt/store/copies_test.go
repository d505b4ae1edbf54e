package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func openIn(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustExist(t *testing.T, path string, want bool) {
	t.Helper()
	_, err := os.Lstat(path)
	if got := err == nil; got != want {
		t.Fatalf("%s exists: %v, want %v (%v)", path, got, want, err)
	}
}

// TestRecordCopies: a record CRI sees has a copy in its directory that
// reads back as the record; one being created or removed, or deleted, has
// none; a VM's copy waits for its directory.
func TestRecordCopies(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := openIn(t, state)
	sb := &Sandbox{ID: "sb1", Handler: "vm", Creating: true, Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Uid: "u"}, Labels: map[string]string{"io.kubernetes.pod.uid": "u"}}}
	sbCopy := SandboxCopyPath(state, "sb1")
	if err := s.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	s.FlushCopies()
	mustExist(t, sbCopy, false)
	sb.Creating = false
	if err := s.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	s.FlushCopies()
	got, err := ReadSandboxCopy(sbCopy)
	if err != nil || got.ID != "sb1" || !proto.Equal(got.Config, sb.Config) {
		t.Fatalf("copy of the pod: %+v, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Dir(sbCopy)); fi.Mode().Perm() != 0o711 {
		t.Fatalf("pod dir mode %v, want 0711", fi.Mode().Perm())
	}

	vmDir := filepath.Join(state, "vms", "c1")
	c := ctr("c1", "sb1", func(c *Container) { c.Dir, c.Creating = vmDir, true })
	putC(t, s, c)
	c.Creating = false
	putC(t, s, c) // no directory yet: no copy, no error
	s.FlushCopies()
	mustExist(t, ContainerCopyPath(vmDir), false)
	if err := os.MkdirAll(vmDir, 0o711); err != nil {
		t.Fatal(err)
	}
	c.VCPUs = 3
	putC(t, s, c)
	s.FlushCopies()
	gotC, err := ReadContainerCopy(ContainerCopyPath(vmDir))
	if err != nil || gotC.VCPUs != 3 || gotC.SandboxID != "sb1" || gotC.Config.GetMetadata().GetName() != "vm-c1" {
		t.Fatalf("copy of the VM: %+v, %v", gotC, err)
	}
	c.Removing = true
	putC(t, s, c)
	s.FlushCopies()
	mustExist(t, ContainerCopyPath(vmDir), false)

	if err := os.WriteFile(filepath.Join(filepath.Dir(sbCopy), "disk.qcow2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sb1"); err != nil {
		t.Fatal(err)
	}
	s.FlushCopies()
	mustExist(t, sbCopy, false)
	mustExist(t, filepath.Dir(sbCopy), true) // the pod's disk is not the store's
}

// TestRecordCopyFollowsTheLastWrite: writes of one record racing each
// other leave the copy of the one committed last.
func TestRecordCopyFollowsTheLastWrite(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := openIn(t, state)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := &Sandbox{ID: "sb", Config: &runtimeapi.PodSandboxConfig{Hostname: fmt.Sprint("h", i)}}
			if err := s.PutSandbox(sb); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s.FlushCopies()
	rec, err := s.Sandbox("sb")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ReadSandboxCopy(SandboxCopyPath(state, "sb"))
	if err != nil || cp.Config.GetHostname() != rec.Config.GetHostname() {
		t.Fatalf("copy says %q (%v), the store %q", cp.Config.GetHostname(), err, rec.Config.GetHostname())
	}
}

// TestRecordCopyErrors: a copy that cannot be written is reported, the
// record's write succeeds; a copy that cannot be read says why.
func TestRecordCopyErrors(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := openIn(t, state)
	var mu sync.Mutex
	var reported []string
	s.OnCopyError(func(path string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, path+": "+err.Error())
	})
	notDir := filepath.Join(state, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	putC(t, s, ctr("c1", "sb1", func(c *Container) { c.Dir = notDir }))
	s.FlushCopies()
	mu.Lock()
	if len(reported) != 1 || !strings.Contains(reported[0], "not a directory") {
		t.Fatalf("reported %q", reported)
	}
	mu.Unlock()

	for name, tc := range map[string]struct{ content, want string }{
		"newer":     {`{"format": 99, "record": {"id": "x"}}`, "format 99, written by a newer crimux"},
		"no record": {`{"format": 3}`, "no format or no record"},
		"garbage":   {`{"format": 3, "rec`, "record copy"},
	} {
		path := filepath.Join(state, name+".json")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSandboxCopy(path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want %q naming the file", name, err, tc.want)
		}
	}
	if _, err := ReadContainerCopy(filepath.Join(state, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing copy: %v", err)
	}
}

// TestRecordCopiesWrittenAtOpen: opening a store writes the copy of every
// record CRI sees: a store of a crimux before copies gets them all.
func TestRecordCopiesWrittenAtOpen(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	vmDir := filepath.Join(state, "vms", "c1")
	if err := os.MkdirAll(vmDir, 0o711); err != nil {
		t.Fatal(err)
	}
	s, err := Open(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sb1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sb2", Removing: true}); err != nil {
		t.Fatal(err)
	}
	putC(t, s, ctr("c1", "sb1", func(c *Container) { c.Dir = vmDir }))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{SandboxCopyPath(state, "sb1"), ContainerCopyPath(vmDir)} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	s = openIn(t, state)
	s.FlushCopies()
	if _, err := ReadSandboxCopy(SandboxCopyPath(state, "sb1")); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadContainerCopy(ContainerCopyPath(vmDir)); err != nil || c.ID != "c1" {
		t.Fatalf("the VM's copy: %+v, %v", c, err)
	}
	mustExist(t, SandboxCopyPath(state, "sb2"), false)
}
