package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestShareHonoursSecurityContext: on a share, the guest has no more
// rights than the pod's security context gives a container. The busybox
// guest, as root, makes a block device node and setuid-root binaries (its
// own copy chowned to root, and a root-owned binary the host put there) on
// a read-write share; a guest user (uid 1234) writes a file, and root
// writes into an fsGroup directory (root's, group 2000, 2775):
//
//   - a pod that runs as user 1000 with every capability dropped: no
//     device node and no setuid-root file appear in the host directory;
//     every guest user writes as 1000 (group 0, as containerd gives a user
//     without a group), who cannot write the fsGroup directory;
//   - the same with run_as_group 3000 and supplemental group 2000: files
//     are 1000:3000's, and the fsGroup directory is writable through the
//     supplemental group;
//   - root with every capability dropped: no device node (no CAP_MKNOD);
//     every guest user writes as root, the container's one user, who owns
//     root's files and so may make them setuid, as such a container may;
//   - the same pod without restrictions: everything appears and the guest
//     user's uid passes through (so the test can fail).
//
// A read-only share stays read-only, and rmp leaves no virtiofsd (nor
// the helper that waits for one in a user namespace), in every case. The
// host directories
// are 0777 (0755 read-only) under the test's 0700 temporary directories:
// the share must be writable for the refusals to mean anything, and must
// be served even though the user cannot pass the directories above it.
func TestShareHonoursSecurityContext(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	const dropAll = `"capabilities": {"drop_capabilities": ["ALL"]}`
	for _, tc := range []struct {
		name, securityContext string
		want                  shareOutcome
	}{
		{"run as 1000 with every capability dropped", `"run_as_user": {"value": 1000}, ` + dropAll,
			shareOutcome{userFile: "1000:0", fsGroupFile: "none"}},
		{"run as 1000:3000 with a supplemental group", `"run_as_user": {"value": 1000}, "run_as_group": {"value": 3000}, "supplemental_groups": [2000], ` + dropAll,
			shareOutcome{userFile: "1000:3000", fsGroupFile: "1000:2000"}},
		{"root with every capability dropped", dropAll,
			shareOutcome{setuidCopy: true, setuidHost: true, userFile: "0:0", fsGroupFile: "0:2000"}},
		{"no restrictions", "",
			shareOutcome{device: true, setuidCopy: true, setuidHost: true, userFile: "1234:1234", fsGroupFile: "0:2000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "share")
			mkdirMode(t, dir, 0o777, 0, 0)
			mkdirMode(t, filepath.Join(dir, "fsgroup"), 0o775|os.ModeSetgid, 0, 2000)
			copyFile(t, "/bin/true", filepath.Join(dir, "rootbin"), 0o755)
			readOnly := filepath.Join(t.TempDir(), "config")
			mkdirMode(t, readOnly, 0o755, 0, 0)
			writeFile(t, filepath.Join(readOnly, "ro.txt"), "CRIMUX-SHARE-RO")
			v := startShareVM(t, c, parent, dir, readOnly, tc.securityContext)
			for _, tag := range []string{"data", "config"} {
				v.guestOutput(t, fmt.Sprintf("grep -q ' /%s ' /proc/mounts || (mkdir -p /%s && mount -t virtiofs %s /%s); echo ok", tag, tag, tag, tag))
			}
			checkReadOnlyShare(t, v, readOnly)
			if got := tryShareRights(t, v, dir); got != tc.want {
				t.Errorf("on the host:\n%+v\nwant\n%+v", got, tc.want)
			}
			c.crictl("rmp", "-f", v.podID)
			testutil.Eventually(t, within(t, 10*time.Second), "no virtiofsd nor helper left", func() error {
				if pids := processesNaming(dir); len(pids) > 0 {
					return fmt.Errorf("processes %v still serve %s", pids, dir)
				}
				return nil
			})
		})
	}
}

// shareOutcome is what the guest's attempts left in the host directory.
type shareOutcome struct {
	// device: a block device node; setuidCopy, setuidHost: the guest's
	// copy of busybox, the host's root-owned binary are setuid root.
	device, setuidCopy, setuidHost bool
	// userFile, fsGroupFile: "uid:gid" of the file the guest user wrote
	// and of the one root wrote in the fsGroup directory, or "none".
	userFile, fsGroupFile string
}

// tryShareRights has the guest try what a restricted pod may not, on the
// share of dir at /data, and reads what it left on the host.
func tryShareRights(t *testing.T, v *testVM, dir string) shareOutcome {
	t.Helper()
	v.guestOutput(t, "grep -q '^app:' /etc/passwd || echo 'app:x:1234:1234::/:/bin/sh' >>/etc/passwd; echo ok")
	t.Logf("mknod: %s", v.guestRun(t, "mknod /data/blk b 7 0"))
	t.Logf("setuid copy: %s", v.guestRun(t, "cp /bin/busybox /data/suid && chown 0:0 /data/suid && chmod u+s /data/suid"))
	t.Logf("setuid host binary: %s", v.guestRun(t, "chmod u+s /data/rootbin"))
	t.Logf("guest user's file: %s", v.guestRun(t, "su app -c 'echo written >/data/byapp'"))
	t.Logf("fsGroup directory: %s", v.guestRun(t, "echo written >/data/fsgroup/shared"))
	return shareOutcome{
		device:      isBlockDevice(filepath.Join(dir, "blk")),
		setuidCopy:  isSetuidRoot(filepath.Join(dir, "suid")),
		setuidHost:  isSetuidRoot(filepath.Join(dir, "rootbin")),
		userFile:    ownerOf(filepath.Join(dir, "byapp")),
		fsGroupFile: ownerOf(filepath.Join(dir, "fsgroup", "shared")),
	}
}

// checkReadOnlyShare: the share of readOnly at /config reads, and refuses
// a write.
func checkReadOnlyShare(t *testing.T, v *testVM, readOnly string) {
	t.Helper()
	if got := v.guestOutput(t, "cat /config/ro.txt"); got != "CRIMUX-SHARE-RO" {
		t.Errorf("the read-only share reads %q", got)
	}
	if out := v.guestRun(t, "echo no >/config/written"); strings.HasPrefix(out, "0:") {
		t.Errorf("a write to the read-only share succeeded (%s)", out)
	}
	if _, err := os.Stat(filepath.Join(readOnly, "written")); err == nil {
		t.Error("the guest wrote into the read-only directory")
	}
}

// startShareVM runs a VM pod whose container shares dir at /data and
// readOnly at /config, read-only, with the given security context, and
// waits for its disk.
func startShareVM(t *testing.T, c *crimux, parent, dir, readOnly, securityContext string) *testVM {
	t.Helper()
	name := "vm-share-rights-" + strings.ToLower(randomToken()[:6])
	pod := vmPodJSON(t, name, parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	ctr := writeJSON(t, "vmctr-share-rights.json", fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "mounts": [{"container_path": "/data", "host_path": %q},
             {"container_path": "/config", "host_path": %q, "readonly": true}],
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d},
            "security_context": {%s}}
}`, vmImage, dir, readOnly, vmCPUQuota, vmMemory, securityContext))
	out, err := c.crictlTimeout(30*time.Second, "create", podID, ctr, pod)
	if err != nil {
		t.Fatalf("create: %v: %s", err, out)
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

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

func isBlockDevice(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
}

func isSetuidRoot(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && fi.Mode()&os.ModeSetuid != 0
}

// ownerOf is "uid:gid" of p, or "none".
func ownerOf(p string) string {
	fi, err := os.Lstat(p)
	if err != nil {
		return "none"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// processesNaming lists the processes whose command line names dir.
func processesNaming(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir) {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// mkdirMode makes a directory with exactly mode (umask aside) and owner.
func mkdirMode(t *testing.T, dir string, mode os.FileMode, uid, gid int) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode&os.ModePerm|mode&os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
}
