package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/testutil"
)

// userDataBudget is how long a refused create, and then the pod's stop
// and its removal, may each take: crictl's own start included, on a
// loaded 2-core machine. A FIFO read while the pod's lock is held took
// them forever.
const userDataBudget = 10 * time.Second

const leakMarker = "leaked-from-the-host"

// TestVMUserDataHostile: the volume at /crimux/cloud-init is the tenant's.
// A user-data that is a FIFO, a device node or a link out of the volume to
// a root-only host file makes CreateContainer fail at once with
// InvalidArgument naming the mount, nothing of the host file anywhere, and
// the pod then stops and is removed at once.
func TestVMUserDataHostile(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	// A root-only host file; its content must come out nowhere.
	secret := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(secret, []byte("#cloud-config\nhostname: "+leakMarker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name  string
		make  func(path string) error
		words []string
	}{
		{"a FIFO", func(p string) error { return unix.Mkfifo(p, 0o644) }, []string{"a FIFO, not a regular file"}},
		{"a device node", func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) },
			[]string{"a character device, not a regular file"}},
		{"a symlink leaving the volume", func(p string) error { return os.Symlink(secret, p) }, []string{"outside the volume"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := t.TempDir()
			userData := filepath.Join(vol, "user-data")
			if err := tc.make(userData); err != nil {
				t.Fatal(err)
			}
			pod := vmPodJSON(t, fmt.Sprintf("vm-userdata-%d", i), parent, "")
			podID := c.crictl("runp", "--runtime", "vm", pod)
			t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
			// Before that (cleanups run last first): a read stuck on
			// the FIFO is let go, so the pod can be removed.
			t.Cleanup(func() {
				if fd, err := unix.Open(userData, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					unix.Close(fd)
				}
			})
			opens := testutil.WatchOpens(t, userData) // the device, or the host file the link names
			ctr := vmStorageContainerJSON(t, 0, fmt.Sprintf(
				`"mounts": [{"container_path": "/crimux/cloud-init", "host_path": %q, "readonly": true}]`, vol))

			out, took, err := c.crictlWithin(userDataBudget, "create", podID, ctr, pod)
			t.Logf("create took %v: %v", took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatalf("create succeeded (%s), want InvalidArgument", out)
			}
			for _, w := range append([]string{"InvalidArgument", "config.mounts[0]"}, tc.words...) {
				if !strings.Contains(out, w) {
					t.Errorf("create does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, leakMarker) || strings.Contains(c.logs.String(), leakMarker) {
				t.Errorf("the host file's content came out:\n%s", out)
			}
			if n := opens(); n > 0 {
				t.Errorf("crimux opened %s (or what it links to) %d times", userData, n)
			}
			for _, verb := range []string{"stopp", "rmp"} {
				out, took, err := c.crictlWithin(userDataBudget, verb, podID)
				t.Logf("%s took %v: %v", verb, took.Round(time.Millisecond), err)
				if err != nil {
					t.Errorf("%s after the refused create: %v\n%s", verb, err, out)
				}
			}
			if !t.Failed() {
				assertNoVMFiles(t, c)
				assertNoPodFiles(t, c)
			}
		})
	}
}

// crictlWithin runs crictl with d as its deadline (crictl's and the
// process's own), returning how long it took.
func (c *crimux) crictlWithin(d time.Duration, args ...string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	out, err := c.crictlCmd(ctx, nil, append([]string{"--timeout", d.String()}, args...)...)
	return out, time.Since(start), err
}
