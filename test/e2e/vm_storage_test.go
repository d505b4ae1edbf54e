package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMStorage: a pod's block device and directories reach the guest
// through crimux with crictl, against real containerd, libvirtd, qemu and
// virtiofsd. The busybox test VM is enough: its /init loads virtio-fs, and
// its console shell does the rest.
//
//   - a loop device given as a CRI device is a virtio-blk disk whose serial
//     comes from its container path; what the guest writes lands on the
//     loop device;
//   - a host directory given as a CRI mount is a virtio-fs share: the guest
//     reads its file, sees a change made on the host, and writes back; a
//     read-only mount refuses the guest's write;
//   - each share's virtiofsd runs in the pod's cgroup;
//   - a snapshot of the shut-down VM (crimuxctl), then the container is
//     stopped and attempt 1 created in the same pod: it boots the same
//     root disk (a file written before is there), finds the marker on the
//     block device, lists the snapshot and restores it (a file written
//     after it is gone);
//   - rmp leaves no virtiofsd, no VM or pod files.
func TestVMStorage(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	loop := loopDevice(t, 16<<20)
	shared, readOnly := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(shared, "hello.txt"), "CRIMUX-SHARE-ONE")
	writeFile(t, filepath.Join(readOnly, "ro.txt"), "CRIMUX-SHARE-RO")
	storage := storageFields(loop, shared, readOnly)

	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-storage", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	v := startStorageVM(t, c, podID, pod, 0, storage)
	token := randomToken()

	t.Run("block device", func(t *testing.T) {
		if got := v.guestOutput(t, "cat /sys/block/vdb/serial"); got != "dev-xvdb" {
			t.Fatalf("serial of vdb: %q, want dev-xvdb (from /dev/xvdb)", got)
		}
		v.guestOutput(t, fmt.Sprintf("echo CRIMUX-BLK-%s | dd of=/dev/vdb bs=512 count=1 conv=sync,fsync 2>/dev/null; echo ok", token))
		testutil.Eventually(t, within(t, 10*time.Second), "the marker on the loop device", func() error {
			return deviceHas(loop, "CRIMUX-BLK-"+token)
		})
		v.guestOutput(t, fmt.Sprintf("echo ROOT-%s >/mnt/root-marker && sync && echo ok", token))
	})
	t.Run("shared directories", func(t *testing.T) {
		for _, tag := range []string{"data", "config"} { // typed again if lost: idempotent
			v.guestOutput(t, fmt.Sprintf("grep -q ' /%s ' /proc/mounts || (mkdir -p /%s && mount -t virtiofs %s /%s); echo ok", tag, tag, tag, tag))
		}
		if got := v.guestOutput(t, "cat /data/hello.txt"); got != "CRIMUX-SHARE-ONE" {
			t.Fatalf("/data/hello.txt in the guest: %q", got)
		}
		if got := v.guestOutput(t, "cat /config/ro.txt"); got != "CRIMUX-SHARE-RO" {
			t.Fatalf("/config/ro.txt in the guest: %q", got)
		}
		if out := v.guestRun(t, "echo no >/config/written"); strings.HasPrefix(out, "0:") {
			t.Fatalf("a write to the read-only share succeeded (%s)", out)
		}
		if _, err := os.Stat(filepath.Join(readOnly, "written")); err == nil {
			t.Fatal("the guest wrote into the read-only directory")
		}
		v.guestOutput(t, fmt.Sprintf("echo GUEST-%s >/data/from-guest && echo ok", token))
		if b, _ := os.ReadFile(filepath.Join(shared, "from-guest")); strings.TrimSpace(string(b)) != "GUEST-"+token {
			t.Fatalf("the guest's write on the host: %q", b)
		}
		writeFile(t, filepath.Join(shared, "hello.txt"), "CRIMUX-SHARE-TWO")
		testutil.Eventually(t, within(t, 20*time.Second), "the host's change seen in the guest", func() error {
			if got := v.guestOutput(t, "cat /data/hello.txt"); got != "CRIMUX-SHARE-TWO" {
				return fmt.Errorf("guest reads %q", got)
			}
			return nil
		})
	})
	t.Run("virtiofsd in the pod's cgroup", func(t *testing.T) {
		pids := virtiofsdOf(shared)
		if len(pids) == 0 {
			t.Fatalf("no virtiofsd serves %s", shared)
		}
		for _, pid := range append(pids, virtiofsdOf(readOnly)...) {
			checkThreadsUnder(t, pid, parent)
		}
	})
	ctl := ctlBin(t)
	bootAgain := func(t *testing.T, v *testVM, state string) {
		t.Helper()
		from := v.consoleSize()
		c.ctlOK(t, ctl, "vm", "power", v.ctrID, state, "--grace-period", "30s")
		v.waitConsole(t, from, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	}
	t.Run("a snapshot of the shut-down VM", func(t *testing.T) {
		c.ctlOK(t, ctl, "vm", "power", v.ctrID, "Shutdown", "--grace-period", "30s")
		c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "before")
		bootAgain(t, v, "Running")
		v.guestOutput(t, "echo later >/mnt/after-snapshot && sync && echo ok")
	})
	t.Run("attempt 1 boots the same disk", func(t *testing.T) {
		c.crictl("stop", "--timeout", "10", v.ctrID)
		v = startStorageVM(t, c, podID, pod, 1, storage)
		if got := v.guestOutput(t, "cat /mnt/root-marker"); got != "ROOT-"+token {
			t.Fatalf("root disk after the restart holds %q, want ROOT-%s", got, token)
		}
		if got := v.guestOutput(t, "dd if=/dev/vdb bs=512 count=1 2>/dev/null | head -n 1"); got != "CRIMUX-BLK-"+token {
			t.Fatalf("block device after the restart holds %q", got)
		}
	})
	t.Run("attempt 1 has the snapshot and restores it", func(t *testing.T) {
		if list := c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID); !strings.Contains(list, "before") {
			t.Fatalf("snapshots of attempt 1:\n%s\nwant the one made under attempt 0", list)
		}
		c.ctlOK(t, ctl, "vm", "snapshot", "restore", v.ctrID, "before")
		bootAgain(t, v, "Running")
		if out := v.guestRun(t, "cat /mnt/after-snapshot"); strings.HasPrefix(out, "0:") {
			t.Fatalf("a file written after the snapshot survived its restore (%s)", out)
		}
		if got := v.guestOutput(t, "cat /mnt/root-marker"); got != "ROOT-"+token {
			t.Fatalf("root disk after the restore holds %q, want ROOT-%s", got, token)
		}
	})
	t.Run("rmp leaves nothing", func(t *testing.T) {
		c.crictl("rmp", "-f", podID)
		testutil.Eventually(t, within(t, 10*time.Second), "virtiofsd gone", func() error {
			if pids := append(virtiofsdOf(shared), virtiofsdOf(readOnly)...); len(pids) > 0 {
				return fmt.Errorf("virtiofsd %v still running", pids)
			}
			return nil
		})
		assertNoVMFiles(t, c)
		assertNoPodFiles(t, c)
	})
}

// startStorageVM creates and starts attempt n of the storage VM in podID
// and waits for its disk.
func startStorageVM(t *testing.T, c *crimux, podID, pod string, attempt int, storage string) *testVM {
	t.Helper()
	ctr := vmStorageContainerJSON(t, attempt, storage)
	out, err := c.crictlTimeout(30*time.Second, "create", podID, ctr, pod)
	if err != nil {
		t.Fatalf("create attempt %d: %v: %s", attempt, err, out)
	}
	v := &testVM{c: c, podID: podID, ctrID: out, domain: domainOf(out)}
	c.crictl("start", v.ctrID)
	t.Cleanup(func() {
		if t.Failed() {
			log := v.consoleLog()
			t.Logf("console of %s, last 3000 bytes:\n%s", v.domain, log[max(0, len(log)-3000):])
		}
	})
	v.waitConsole(t, 0, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	return v
}

// storageFields are the devices and mounts of the storage VM.
func storageFields(loop, shared, readOnly string) string {
	return fmt.Sprintf(`"devices": [{"container_path": "/dev/xvdb", "host_path": %q, "permissions": "mrw"}],
  "mounts": [{"container_path": "/data", "host_path": %q},
             {"container_path": "/config", "host_path": %q, "readonly": true},
             {"container_path": "/etc/hosts", "host_path": "/etc/hosts"}]`, loop, shared, readOnly)
}

// vmStorageContainerJSON is the test VM's container config with extra
// fields (devices, mounts).
func vmStorageContainerJSON(t *testing.T, attempt int, fields string) string {
	return writeJSON(t, "vmctr-storage.json", fmt.Sprintf(`{
  "metadata": {"name": "vm", "attempt": %d},
  "image": {"image": %q},
  "log_path": "vm-%d.log",
  %s,
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d}}
}`, attempt, vmImage, attempt, fields, vmCPUQuota, vmMemory))
}

// loopDevice attaches a zeroed file of size bytes to a loop device,
// detached at cleanup.
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "blk.img")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", f).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// deviceHas reports whether the first sector of dev holds s.
func deviceHas(dev, s string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 512)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return err
	}
	if !bytes.Contains(buf, []byte(s)) {
		return fmt.Errorf("%s starts with %q", dev, bytes.TrimRight(buf[:64], "\x00"))
	}
	return nil
}

// virtiofsdOf lists the virtiofsd processes serving dir.
func virtiofsdOf(dir string) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "virtiofsd" {
			continue
		}
		if strings.Contains(string(b), "source="+dir+",") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, pid)
		}
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// assertNoPodFiles asserts crimux's state dir holds no VM pod directory.
func assertNoPodFiles(t *testing.T, c *crimux) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(c.stateDir, "pods"))
	live := c.crictl("pods", "-q")
	var left []string
	for _, e := range entries {
		files, _ := os.ReadDir(filepath.Join(c.stateDir, "pods", e.Name()))
		// A live pod's record copy (store/copies.go) is the pod's, not
		// something its refused container left.
		if len(files) == 1 && files[0].Name() == "sandbox.json" && strings.Contains(live, e.Name()) {
			continue
		}
		left = append(left, e.Name())
	}
	if len(left) != 0 {
		t.Fatalf("VM pod files left behind in %s: %v", c.stateDir, left)
	}
}
