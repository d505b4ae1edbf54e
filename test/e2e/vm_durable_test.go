package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A VM's root disk on a volume: crimux.io/root-disk names a volumeDevices
// devicePath (a block volume) or a volumeMounts mountPath (a filesystem
// volume).

// durableVolume is one way to give a VM pod its root volume.
type durableVolume struct {
	name string
	// ctrJSON is the container config's devices or mounts entry.
	ctrJSON string
	// containerPath is what crimux.io/root-disk names.
	containerPath string
	// disk is the host file or device holding the disk.
	disk string
	// annotations are more of the container's, JSON ("" none).
	annotations string
}

func blockVolume(t *testing.T, size int64) durableVolume {
	dev := loopDevice(t, size)
	return durableVolume{name: "block", containerPath: "/dev/xvda", disk: dev,
		ctrJSON: fmt.Sprintf(`"devices": [{"container_path": "/dev/xvda", "host_path": %q, "permissions": "mrw"}]`, dev)}
}

func dirVolume(t *testing.T) durableVolume {
	dir := t.TempDir()
	return durableVolume{name: "directory", containerPath: "/var/lib/vm", disk: filepath.Join(dir, "disk.qcow2"),
		ctrJSON: fmt.Sprintf(`"mounts": [{"container_path": "/var/lib/vm", "host_path": %q}]`, dir)}
}

// durableContainerJSON is the test VM's container config with the volume
// as its root disk.
func durableContainerJSON(t *testing.T, vol durableVolume) string {
	return durableContainerJSONAttempt(t, vol, 0)
}

func durableContainerJSONAttempt(t *testing.T, vol durableVolume, attempt int) string {
	return durableContainerJSONOf(t, vmImage, vol, attempt)
}

// durableContainerJSONOf is a container config of image on the volume.
func durableContainerJSONOf(t *testing.T, image string, vol durableVolume, attempt int) string {
	return writeJSON(t, "vmctr.json", fmt.Sprintf(`{
  "metadata": {"name": "vm", "attempt": %d},
  "image": {"image": %q},
  "log_path": "vm.log",
  "annotations": {"crimux.io/root-disk": %q%s},
  %s,
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d}}
}`, attempt, image, vol.containerPath, vol.annotations, vol.ctrJSON, vmCPUQuota, vmMemory))
}

// startDurableVM runs the test VM on vol and waits until its guest has
// mounted its disk; it returns the VM and crimux's lines in its log.
func startDurableVM(t *testing.T, c *crimux, name string, vol durableVolume) (*testVM, string) {
	t.Helper()
	pod := vmPodJSON(t, name, testCgroupParent(t), "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctrID := c.crictl("create", podID, durableContainerJSON(t, vol), pod)
	notes := crimuxNotes(t, c, ctrID)
	c.crictl("start", ctrID)
	v := &testVM{c: c, podID: podID, ctrID: ctrID, domain: domainOf(ctrID), podJSON: pod}
	waitShell(t, v)
	return v, notes
}

// waitShell waits until the test VM has mounted its disk and its console
// shell reads: two uptime lines after the disk's (the shell starts right
// after the first; a line typed before it reads is lost, and guestRun
// would wait 8 s to type it again).
func waitShell(t *testing.T, v *testVM) {
	t.Helper()
	v.waitConsole(t, 0, bootTimeout, regexp.MustCompile(`(?m)^CRIMUX-DISK: `))
	uptime := regexp.MustCompile(`(?m)^CRIMUX-UPTIME: `)
	for range 2 {
		from := v.consoleSize()
		v.waitConsole(t, from, 15*time.Second, uptime)
	}
}

// crimuxNotes are crimux's own lines in a container's log (stderr).
func crimuxNotes(t *testing.T, c *crimux, ctrID string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint, "logs", ctrID)
	cmd.Stdout = io.Discard
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crictl logs %s: %v: %s", ctrID, err, stderr.String())
	}
	return stderr.String()
}

// TestVMDurableRootDisk (make e2e-vm-durable): a VM pod whose
// root disk is a block device, then one whose root disk is a directory:
// the first pod imports the image (its log says so), the guest writes a
// file and a snapshot is taken; the pod is removed; a new pod on the same
// volume boots without importing (its log says so), finds the file, lists
// the snapshot and restores it. The volume is never given to anyone but
// the VM: the host's device node stays root's.
func TestVMDurableRootDisk(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startVMAPICrimux(t)
	c.crictl("pull", vmImage)
	for _, mk := range []func(*testing.T) durableVolume{
		func(t *testing.T) durableVolume {
			// A disk of 64 MiB on 512: room for the snapshots (a running
			// VM's holds its RAM).
			vol := blockVolume(t, 512<<20)
			vol.annotations = `, "crimux.io/root-disk-size": "64Mi"`
			return vol
		},
		dirVolume,
	} {
		vol := mk(t)
		t.Run(vol.name, func(t *testing.T) {
			first, notes := startDurableVM(t, c, "durable-a-"+vol.name, vol)
			if !strings.Contains(notes, "crimux: importing the image's disk") || !strings.Contains(notes, "crimux: imported") ||
				vol.annotations != "" && !strings.Contains(notes, "qcow2 disk of 64.0 MiB") {
				t.Fatalf("the first pod's log does not tell the import:\n%s", notes)
			}
			first.guestRun(t, "echo kept-1 > /mnt/durable && sync")
			c.ctlOK(t, ctl, "vm", "snapshot", "create", first.ctrID, "kept")
			first.guestRun(t, "echo kept-2 > /mnt/durable && sync")
			restarted := restartDurableVM(t, c, first, vol)
			if got := restarted.guestOutput(t, "cat /mnt/durable"); got != "kept-2" {
				t.Fatalf("after a container restart the guest reads %q, want kept-2", got)
			}
			checkRootsOnly(t, vol) // while its VM runs, written to and restarted
			c.crictl("stopp", first.podID)
			c.crictl("rmp", first.podID)
			checkRootsOnly(t, vol)

			second, notes := startDurableVM(t, c, "durable-b-"+vol.name, vol)
			if strings.Contains(notes, "importing") || !strings.Contains(notes, "booting it as it is") {
				t.Fatalf("the second pod's log, want no import:\n%s", notes)
			}
			if got := second.guestOutput(t, "cat /mnt/durable"); got != "kept-2" {
				t.Fatalf("the second pod's guest reads %q, want kept-2", got)
			}
			if list := c.ctlOK(t, ctl, "vm", "snapshot", "list", second.ctrID); !strings.Contains(list, "kept") {
				t.Fatalf("the second pod's VM lists no snapshot kept:\n%s", list)
			}
			c.ctlOK(t, ctl, "vm", "snapshot", "restore", second.ctrID, "kept")
			if got := second.guestOutput(t, "cat /mnt/durable"); got != "kept-1" {
				t.Fatalf("after restoring the snapshot the guest reads %q, want kept-1", got)
			}
		})
	}
}

// restartDurableVM stops v's container and starts the pod's next one
// (attempt 1, as kubelet restarts a container) on the same volume: it
// boots the disk as it is.
func restartDurableVM(t *testing.T, c *crimux, v *testVM, vol durableVolume) *testVM {
	t.Helper()
	c.crictl("stop", v.ctrID)
	ctrID := c.crictl("create", v.podID, durableContainerJSONAttempt(t, vol, 1), v.podJSON)
	if notes := crimuxNotes(t, c, ctrID); !strings.Contains(notes, "booting it as it is") {
		t.Fatalf("the restarted container's log, want no import:\n%s", notes)
	}
	c.crictl("start", ctrID)
	next := &testVM{c: c, podID: v.podID, ctrID: ctrID, domain: domainOf(ctrID), podJSON: v.podJSON}
	waitShell(t, next)
	return next
}

// checkRootsOnly: the volume's disk is never the VM's identity's, which
// a later pod of any namespace may be given, while its VM runs or after:
// a device is never given (crimux gives the VM a node of its own), a
// disk file is reached through an idmapped mount.
func checkRootsOnly(t *testing.T, vol durableVolume) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(vol.disk, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("the host's %s is %d:%d's, want root's", vol.disk, st.Uid, st.Gid)
	}
}

// volumeSum is the sha256 of the whole disk of vol ("" if none).
func volumeSum(t *testing.T, vol durableVolume) string {
	t.Helper()
	f, err := os.Open(vol.disk)
	if os.IsNotExist(err) {
		return ""
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestVMDurableBadInput: each bad root volume is refused at
// CreateContainer with a code and a message naming the volume, leaving
// nothing behind and the volume as it was: one smaller than the image's
// disk, one whose qcow2 names a backing file, data that is not a qcow2
// where the annotation says qcow2, and a volume a running VM of another
// pod already boots.
func TestVMDurableBadInput(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	refuse := func(t *testing.T, name string, vol durableVolume, code string, words ...string) {
		t.Helper()
		before, dirs := volumeSum(t, vol), vmDirs(t, c)
		pod := vmPodJSON(t, name, testCgroupParent(t), "")
		podID := c.crictl("runp", "--runtime", "vm", pod)
		defer c.crictlErr("rmp", "-f", podID)
		out, err := c.crictlErr("create", podID, durableContainerJSON(t, vol), pod)
		if err == nil {
			t.Fatalf("created %s, want %s", out, code)
		}
		for _, w := range append([]string{code, vol.containerPath}, words...) {
			if !strings.Contains(out, w) {
				t.Fatalf("crictl create: %q lacks %q", out, w)
			}
		}
		if after := volumeSum(t, vol); after != before {
			t.Fatal("the refused volume was changed")
		}
		if got := vmDirs(t, c); got != dirs {
			t.Fatalf("%d VM dirs after the refusal, %d before", got, dirs)
		}
	}
	t.Run("smaller than the image's disk", func(t *testing.T) {
		refuse(t, "durable-small", blockVolume(t, 8<<20), "InvalidArgument", "fewer than the image's disk needs")
	})
	t.Run("a qcow2 naming a backing file", func(t *testing.T) {
		vol := blockVolume(t, 64<<20)
		run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/etc/passwd", "-u", vol.disk, "32M")
		refuse(t, "durable-backing", vol, "FailedPrecondition", "backing file", "/etc/passwd")
	})
	t.Run("raw data called qcow2", func(t *testing.T) {
		vol := blockVolume(t, 64<<20)
		writeAt(t, vol.disk, []byte(strings.Repeat("a raw disk's first MiB ", 1<<15)))
		refuse(t, "durable-raw", vol, "FailedPrecondition", "not a qcow2 disk", "crimux.io/root-disk-format")
	})
	t.Run("a volume a running VM boots", func(t *testing.T) {
		vol := blockVolume(t, 64<<20)
		startDurableVM(t, c, "durable-owner", vol)
		refuse(t, "durable-second", vol, "FailedPrecondition", "is the root disk of VM", "durable-owner")
	})
}

// vmDirs counts crimux's VM directories.
func vmDirs(t *testing.T, c *crimux) int {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(c.stateDir, "vms"))
	return len(entries)
}

func writeAt(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
