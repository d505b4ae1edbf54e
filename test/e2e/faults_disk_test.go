package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testutil"
)

// smallStateFS makes an ext4 filesystem of size bytes on a loop device,
// mounted on a directory of its own (qemu of the VMs traverses it), and
// returns the directory; unmounted at cleanup.
func smallStateFS(t *testing.T, size int64) string {
	t.Helper()
	dev := loopDevice(t, size)
	run(t, "mkfs.ext4", "-q", "-F", dev)
	dir, err := os.MkdirTemp("/var/lib", "crimux-e2e-fullfs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dev, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fill leaves about left bytes free on the filesystem of dir, with a
// file it returns.
func fill(t *testing.T, dir string, left int64) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*st.Bsize - left
	f := filepath.Join(dir, "fill")
	if out, err := exec.Command("fallocate", "-l", fmt.Sprint(n), f).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v: %s", err, out)
	}
	return f
}

// TestFullStateDisk (make e2e-faults): crimux's state dir on a small
// filesystem of its own, filled while a VM writes its disk: qemu pauses
// the VM (its CRI status says PausedNoSpace, its log says why), a new VM
// pod is refused with ResourceExhausted naming the state dir, and so is a
// snapshot; once space is freed the VM is resumed by crimux, finishes its
// write, and new pods and snapshots are made again, with nothing to
// repair.
func TestFullStateDisk(t *testing.T) {
	requireVM(t)
	dir := smallStateFS(t, 768<<20)
	c := startVMAPICrimuxState(t, filepath.Join(dir, "state"))
	v := startTestVM(t, c, "full-writer")
	filler := fill(t, dir, 2<<20)

	// 10 MiB into the guest's disk (16 MiB): its overlay grows past the 2 left.
	from := v.consoleSize()
	v.typeLine(t, "dd if=/dev/urandom of=/mnt/big bs=1M count=10 && sync && echo CRIMUX-WROTE-BIG", 2*time.Second, func() bool { return false })
	testutil.Eventually(t, 2*time.Minute, "the VM paused on the full disk", func() error {
		if state, reason := v.criState(t); reason != "PausedNoSpace" {
			return fmt.Errorf("state %s, reason %q", state, reason)
		}
		return nil
	})
	out, err := c.crictlErr("runp", "--runtime", "vm", vmPodJSON(t, "full-refused", testCgroupParent(t), ""))
	if err == nil || !strings.Contains(out, "ResourceExhausted") || !strings.Contains(out, filepath.Join(dir, "state")) {
		t.Fatalf("runp on a full state dir: %v, %s; want ResourceExhausted naming the state dir", err, out)
	}

	// A snapshot on the full disk is refused up front (it would fail
	// half-way through the VM's memory): nothing of it listed, and the
	// same name works once there is room.
	ctl := ctlBin(t)
	c.ctlFails(t, ctl, "ResourceExhausted", []string{`snapshot "on-full"`, filepath.Join(dir, "state")},
		"vm", "snapshot", "create", v.ctrID, "on-full")
	if list := c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID); strings.Contains(list, "on-full") {
		t.Fatalf("a snapshot refused on the full disk is listed:\n%s", list)
	}

	os.Remove(filler)
	v.waitConsole(t, from, 2*time.Minute, regexp.MustCompile(`(?m)^CRIMUX-WROTE-BIG`))
	if state, reason := v.criState(t); reason != "" {
		t.Fatalf("after the space came back: state %s, reason %q", state, reason)
	}
	if notes := crimuxNotes(t, c, v.ctrID); !strings.Contains(notes, "the VM was paused") || !strings.Contains(notes, "the VM was resumed") {
		t.Fatalf("the VM's log lacks crimux's notes:\n%s", notes)
	}
	c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "on-full")
	startTestVM(t, c, "full-after")
	c.restart() // the store, written while the disk was full, reads back
	if ids := c.crictl("ps", "-q", "--state", "running"); len(strings.Fields(ids)) != 2 {
		t.Fatalf("running after a restart: %q", ids)
	}
}
