package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// A durable VM's volume is the tenant's: another pod of theirs on the same
// volume writes it while crimux, as root, works in it.

// TestVMDurableVolumeLinkRace: a second pod on a directory volume plants
// disk.qcow2 -> a root-only host file, in a loop, while crimux imports the
// image into the volume again (the volume holds crimux's own mark of an
// import cut short, which the tenant can write too: crimux removes the
// file and makes it anew). Whatever the race gives, the host file is never
// written: the import either refuses the link, naming the disk, or writes
// a disk of its own in the volume.
func TestVMDurableVolumeLinkRace(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	c.crictl("pull", busyboxImage)
	vol := dirVolume(t)
	dir := filepath.Dir(vol.disk)

	canary := filepath.Join("/etc", "crimux-e2e-canary-"+randomToken())
	want := []byte("root's own file: no tenant's import may write it\n")
	if err := os.WriteFile(canary, want, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })

	planter := c.crictl("runp", podJSON(t, "link-planter", ""))
	t.Cleanup(func() { c.crictlErr("rmp", "-f", planter) })
	ctr := writeJSON(t, "planter.json", fmt.Sprintf(`{
  "metadata": {"name": "planter"},
  "image": {"image": %q},
  "command": ["sh", "-c", "cd /vol && while :; do ln -s %s disk.qcow2 2>/dev/null; done"],
  "log_path": "planter.log",
  "mounts": [{"container_path": "/vol", "host_path": %q}],
  "linux": {}
}`, busyboxImage, canary, dir))
	c.crictl("start", c.crictl("create", planter, ctr, podJSON(t, "link-planter", "")))
	requirePlanting(t, vol.disk, canary)

	const rounds = 6
	refused, imported := 0, 0
	for i := range rounds {
		seedUnfinishedImport(t, vol.disk)
		pod := vmPodJSON(t, fmt.Sprintf("link-race-%d", i), testCgroupParent(t), "")
		podID := c.crictl("runp", "--runtime", "vm", pod)
		out, err := c.crictlErr("create", podID, durableContainerJSON(t, vol), pod)
		switch {
		case err != nil && strings.Contains(out, "disk.qcow2"):
			refused++
		case err != nil:
			t.Fatalf("round %d: crictl create failed without naming the disk: %v\n%s", i, err, out)
		default:
			imported++
			requireRegularQcow2(t, vol.disk)
		}
		c.crictl("rmp", "-f", podID)
		if got, err := os.ReadFile(canary); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: the root-only host file behind the tenant's link was written: %q (%v)", i, firstBytes(got), err)
		}
	}
	requirePlanting(t, vol.disk, canary)
	t.Logf("%d rounds: %d imports refused the tenant's link, %d wrote a disk of their own; the host file unchanged", rounds, refused, imported)
}

// requirePlanting: the second pod plants its link at path again within
// seconds of the name being free, so every import raced it.
func requirePlanting(t *testing.T, path, target string) {
	t.Helper()
	testutil.Eventually(t, within(t, 30*time.Second), "the second pod planting its link", func() error {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		if got, err := os.Readlink(path); err != nil || got != target {
			return fmt.Errorf("%s: %q %v", path, got, err)
		}
		return nil
	})
}

// seedUnfinishedImport makes path a small qcow2 carrying crimux's mark
// of an import cut short (compatible feature bit 63), as a tenant can
// write it, replacing whatever is there (a link included) at once.
func seedUnfinishedImport(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".seed"
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "compat=1.1", tmp, "16M")
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	if _, err := f.ReadAt(b[:], 80); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(b[:], binary.BigEndian.Uint64(b[:])|1<<63)
	if _, err := f.WriteAt(b[:], 80); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := os.Rename(tmp, path); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// requireRegularQcow2: path is a regular file in the volume, a qcow2.
func requireRegularQcow2(t *testing.T, path string) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s after an import: %v (%v), want a regular file", path, st.Mode(), err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("QFI\xfb")) {
		t.Fatalf("%s after an import is no qcow2 (%v)", path, err)
	}
}

func firstBytes(b []byte) []byte { return b[:min(len(b), 32)] }
