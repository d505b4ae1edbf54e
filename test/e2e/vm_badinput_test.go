package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crimux/crimux/cgroup"
)

// Hostile and broken VM images of the test bed (test/images).
var badVMImages = []struct {
	name, image string
	words       []string
}{
	{"neither disk nor kernel", "127.0.0.1:5117/crimux/vm-bad-empty:latest", []string{"neither"}},
	{"two disks", "127.0.0.1:5117/crimux/vm-bad-twodisks:latest", []string{"/disk/"}},
	{"kernel symlink leaving the image", "127.0.0.1:5117/crimux/vm-bad-symlink:latest", []string{"symlink"}},
	{"qcow2 with a backing file", "127.0.0.1:5117/crimux/vm-bad-backing:latest", []string{"backing"}},
	{"qcow2 with an external data file", "127.0.0.1:5117/crimux/vm-bad-datafile:latest", []string{"data"}},
	// The disk bomb: refused naming its size and the cap.
	{"qcow2 declaring 1 PiB", "127.0.0.1:5117/crimux/vm-bad-bomb:latest", []string{"1125899906842624", "1 PiB", "68719476736", "max_disk_virtual_size_gib"}},
}

// TestVMBadInput: each bad VM request fails with InvalidArgument (or
// FailedPrecondition for a second container) naming the problem, and
// leaves no domain, no VM files and no cgroup behind.
func TestVMBadInput(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	pod := vmPodJSON(t, "vm-bad", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	domainsBefore := virsh(t, "list", "--all", "--name")

	createFails := func(t *testing.T, ctrJSON, code string, words ...string) {
		t.Helper()
		out, err := c.crictlErr("create", podID, ctrJSON, pod)
		if err == nil {
			t.Fatalf("create succeeded (%s), want %s", out, code)
		}
		for _, w := range append([]string{code}, words...) {
			if !strings.Contains(out, w) {
				t.Fatalf("create error does not name %q:\n%s", w, out)
			}
		}
		assertNoVMFiles(t, c)
		if after := virsh(t, "list", "--all", "--name"); after != domainsBefore {
			t.Fatalf("domains changed after a failed create:\nbefore %q\nafter  %q", domainsBefore, after)
		}
	}
	t.Run("no memory limit", func(t *testing.T) {
		createFails(t, vmContainerJSON(t, vmImage, 0, ""), "InvalidArgument", "memory_limit_in_bytes")
	})
	t.Run("unparsable kernel-args annotation", func(t *testing.T) {
		createFails(t, vmContainerJSON(t, vmImage, vmMemory, `"crimux.io/kernel-args": "console=ttyS0 init=\"/bin/sh"`),
			"InvalidArgument", "crimux.io/kernel-args")
	})
	// cloud-init input, on the container's annotations.
	for _, bad := range []struct{ name, annotations, field string }{
		{"malformed user-data", `"crimux.io/cloud-init-user-data": "#cloud-config\nusers: [unclosed\n"`, "crimux.io/cloud-init-user-data"},
		{"user-data neither YAML nor a script", `"crimux.io/cloud-init-user-data": "rm -rf /"`, "crimux.io/cloud-init-user-data"},
		{"user-data over the limit", `"crimux.io/cloud-init-user-data": "#!/bin/sh\n` + strings.Repeat("#", 70<<10) + `"`, "crimux.io/cloud-init-user-data"},
		{"a key that is not an SSH public key", `"crimux.io/ssh-authorized-keys": "ssh-ed25519 bm90IGEga2V5 mallory"`, "crimux.io/ssh-authorized-keys"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			createFails(t, vmContainerJSON(t, vmImage, vmMemory, bad.annotations), "InvalidArgument", bad.field)
		})
	}
	for _, bad := range badVMImages {
		t.Run(bad.name, func(t *testing.T) {
			c.crictl("pull", bad.image)
			createFails(t, vmContainerJSON(t, bad.image, vmMemory, ""), "InvalidArgument", bad.words...)
		})
	}
	// Storage: each bad device or mount is refused naming it.
	regular, dir := filepath.Join(t.TempDir(), "not-a-device"), t.TempDir()
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := 0; i < 17; i++ {
		many = append(many, fmt.Sprintf(`{"container_path": "/v%d", "host_path": %q}`, i, dir))
	}
	for _, bad := range []struct{ name, fields, field, words string }{
		{"a character device as a block device", `"devices": [{"container_path": "/dev/xvdb", "host_path": "/dev/null", "permissions": "mrw"}]`,
			"config.devices[0].host_path", "not a block device"},
		{"a file as a block device", fmt.Sprintf(`"devices": [{"container_path": "/dev/xvdb", "host_path": %q, "permissions": "mrw"}]`, regular),
			"config.devices[0].host_path", "not a block device"},
		{"a mount source that does not exist", `"mounts": [{"container_path": "/data", "host_path": "/no/such/dir"}]`,
			"config.mounts[0].host_path", "no such file"},
		{"bidirectional propagation", fmt.Sprintf(`"mounts": [{"container_path": "/data", "host_path": %q, "propagation": 2}]`, dir),
			"config.mounts[0].propagation", "PROPAGATION_BIDIRECTIONAL"},
		{"more volumes than the bus takes", `"mounts": [` + strings.Join(many, ",") + `]`,
			"config.devices", "at most 16"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			createFails(t, vmStorageContainerJSON(t, 0, bad.fields), "InvalidArgument", bad.field, bad.words)
			assertNoPodFiles(t, c)
		})
	}
	t.Run("second container in a VM pod", func(t *testing.T) {
		first := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
		out, err := c.crictlErr("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
		if err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "exactly one container") {
			t.Fatalf("second create: err %v, output %q; want FailedPrecondition naming the one-container rule", err, out)
		}
		c.crictl("rm", first)
		assertNoVMFiles(t, c)
	})
	t.Run("pod with a bad workload-type annotation", func(t *testing.T) {
		bad := vmPodJSON(t, "vm-bad-anno", parent, `"crimux.io/workload-type": "mainframe"`)
		out, err := c.crictlErr("runp", bad)
		if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "mainframe") {
			t.Fatalf("runp with a bad workload type: err %v, output %q", err, out)
		}
	})
}

// TestVMDoesNotFitItsPod: a VM pod whose cgroup allows 128 MiB
// (a 128 MiB limit and no pod overhead: the annotation route) cannot hold
// a guest and qemu: CreateContainer refuses it up front, naming the
// numbers and the fix, instead of a qemu OOM-killed again and again.
func TestVMDoesNotFitItsPod(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	layout, err := cgroup.Discover()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := layout.Controller("memory")
	if !ok {
		t.Skip("no memory controller")
	}
	dir, file := filepath.Join(h.Mount, parent), "memory.limit_in_bytes"
	if h.Unified {
		file = "memory.max"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(128<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := vmPodJSON(t, "vm-small", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	out, err := c.crictlErr("create", podID, vmContainerJSON(t, vmImage, 128<<20, ""), pod)
	if err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "allows 128 MiB") ||
		!strings.Contains(out, "RuntimeClass vm") {
		t.Fatalf("create in a 128 MiB pod: %v: %s; want FailedPrecondition naming the numbers and the fix", err, out)
	}
	assertNoVMFiles(t, c)
}
