package placer

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/cgroup"
)

// answerWithin reads the Placer's answer to a connection that sends
// nothing, within d.
func answerWithin(t *testing.T, sock string, d time.Duration) (string, error) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 512)
	n, err := c.Read(b)
	return string(b[:n]), err
}

// TestPlacerChecksThePeerFirst: a caller that is not a qemu user is
// refused at once, before the Placer reads a byte: it cannot hold a
// handler open.
func TestPlacerChecksThePeerFirst(t *testing.T) {
	sock, placements := startPlacer(t, nil, WithPeerUIDs(4242))
	start := time.Now()
	answer, err := answerWithin(t, sock, 2*time.Second)
	if err != nil || !strings.Contains(answer, "is not a qemu user") {
		t.Fatalf("answer %q (%v) after %v; want a refusal before any request", answer, err, time.Since(start))
	}
	if len(placements()) != 0 {
		t.Fatal("placed")
	}
}

// TestPlacerCapsItsHandlers: connections that hold a handler each are
// bounded; one more is refused at once.
func TestPlacerCapsItsHandlers(t *testing.T) {
	sock, _ := startPlacer(t, nil)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < maxHandlers; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // every handler is waiting for its request
	answer, err := answerWithin(t, sock, 2*time.Second)
	if err != nil || !strings.Contains(answer, "too many placement requests") {
		t.Fatalf("answer to connection %d: %q (%v); want a refusal at once", maxHandlers+1, answer, err)
	}
}

// TestPlacerRefusesWhileAQemuRuns: with a qemu in the VM's leaf, no other
// process is placed there (nor handed its files), start in flight or not.
func TestPlacerRefusesWhileAQemuRuns(t *testing.T) {
	root := t.TempDir()
	layout := cgroup.Layout{Hierarchies: []cgroup.Hierarchy{{Mount: root, Unified: true, Controllers: []string{"cpu", "memory"}}}}
	spec := cgroup.Spec{Parent: "/kubepods/pod1", Name: "crimux-vm-1"}
	dirs, err := layout.LeafDirs(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dirs[0], 0o755); err != nil {
		t.Fatal(err)
	}
	running := os.Getppid() // any live process: "the VM's qemu"
	if err := os.WriteFile(filepath.Join(dirs[0], "cgroup.procs"), []byte(strconv.Itoa(running)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New("unused", func(string) (cgroup.Spec, bool) { return spec, true }, WithLauncher(ownCgroups),
		WithGrants(func(string) bool { return true }))
	p.layout = func() (cgroup.Layout, error) { return layout, nil }
	placed := false
	p.place = func(cgroup.Layout, cgroup.Spec, int) error { placed = true; return nil }
	start := time.Now()
	err = p.placeVM("crimux-vm-1", os.Getpid())
	if err == nil || !strings.Contains(err.Error(), "runs already") || placed {
		t.Fatalf("placeVM with a qemu in the leaf: %v (placed %v)", err, placed)
	}
	if took := time.Since(start); took < leafSettle {
		t.Fatalf("refused after %v: a dying qemu gets %v to leave", took, leafSettle)
	}
}
