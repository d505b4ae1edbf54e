package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/idcodec"
)

// sweepOf is the shared sweep behind a backend.
func sweepOf(t *testing.T, b *Backend) *sweep {
	t.Helper()
	sweeps.Lock()
	defer sweeps.Unlock()
	for _, sw := range sweeps.byDir {
		if sw.conn.Target() == b.conn.Target() {
			return sw
		}
	}
	t.Fatalf("no sweep for %s", b.conn.Target())
	return nil
}

// recordedParents reads the parents a records dir holds.
func recordedParents(t *testing.T, dir string) string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out = append(out, strings.TrimSpace(string(b)))
	}
	return strings.Join(out, ",")
}

// TestSweepsArePerContainerd: backends of two containerds keep their
// records apart, so neither sweep judges the other's pods by its own list;
// backends in front of one containerd (two entries, or a reload's old and
// new backend) share one sweep, whose reaper sees every one's task-making
// calls, and which stops with the last of them.
func TestSweepsArePerContainerd(t *testing.T) {
	// The sweeps run at once in the background: the pods' parents must
	// exist, or a sweep drops their records as gone.
	root := t.TempDir()
	for _, p := range []string{"podA1", "podA2", "podB1"} {
		if err := os.MkdirAll(filepath.Join(root, "kubepods", p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sweepRoots = func() ([]string, error) { return []string{root}, nil }
	t.Cleanup(func() { sweepRoots = hierarchyRoots })
	state := t.TempDir()
	srvA := crifake.Serve(t, crifake.New("a"), crifake.SocketPath(t, "a.sock"))
	srvB := crifake.Serve(t, crifake.New("b"), crifake.SocketPath(t, "b.sock"))
	kata := idcodec.New("kata")
	dial := func(endpoint string, codec *idcodec.Codec) *Backend {
		b, err := Dial(endpoint, Options{CallTimeout: 10 * time.Second, Codec: codec, StateDir: state})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a1, a2, b1 := dial(srvA.Endpoint(), nil), dial(srvA.Endpoint(), &kata), dial(srvB.Endpoint(), nil)
	defer b1.Close()
	run := func(b *Backend, parent string) {
		_, err := b.Runtime().RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: parent, Uid: parent, Namespace: "ns"},
			Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	sw := sweepOf(t, a1)
	if sweepOf(t, a2) != sw || sweepOf(t, b1) == sw {
		t.Fatal("backends of one containerd must share one sweep, of two containerds not")
	}
	begun, _ := sw.reaper.Calls()
	run(a1, "/kubepods/podA1")
	run(a2, "/kubepods/podA2")
	run(b1, "/kubepods/podB1")
	if now, _ := sw.reaper.Calls(); now != begun+2 {
		t.Fatalf("containerd A's reaper saw %d task-making calls, want the 2 of its two backends", now-begun)
	}
	dirA, dirB := recordsDir(state, srvA.Endpoint()), recordsDir(state, srvB.Endpoint())
	if got := recordedParents(t, dirA); !strings.Contains(got, "podA1") || !strings.Contains(got, "podA2") || strings.Contains(got, "podB1") {
		t.Fatalf("containerd A's records: %s", got)
	}
	if got := recordedParents(t, dirB); got != "/kubepods/podB1" {
		t.Fatalf("containerd B's records: %s", got)
	}
	a1.Close()
	if sweepOf(t, a2) != sw {
		t.Fatal("the sweep stopped while a backend still uses it")
	}
	a2.Close()
	sweeps.Lock()
	_, running := sweeps.byDir[dirA]
	sweeps.Unlock()
	if running {
		t.Fatal("the sweep runs on after its last backend closed")
	}
}
