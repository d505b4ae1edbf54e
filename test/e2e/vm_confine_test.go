package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQemuOpensOnlyItsVMsFiles: a crimux VM's qemu, started by libvirt
// through the wrapper, opens nothing its command line does not name —
// as a guest that owns qemu would make it, or as a disk header rewritten
// after crimux checked it would (an external data file). Asked over its
// monitor to open a file any uid may write (a host file outside its
// VM's directory), it is refused; its own disk, named on its command
// line, it still opens.
func TestQemuOpensOnlyItsVMsFiles(t *testing.T) {
	parallel(t)
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	_, ctrID := runVM(t, c, "vm-confined", testCgroupParent(t))
	domain := domainOf(ctrID)

	canary := filepath.Join("/var/tmp", "crimux-e2e-canary-"+randomToken())
	if err := os.WriteFile(canary, []byte("a host file every uid may write\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(canary, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })

	disks, _ := filepath.Glob(filepath.Join(c.stateDir, "pods", "*", "disk.qcow2"))
	if len(disks) != 1 {
		t.Fatalf("the VM pod's disk: %v, want one", disks)
	}
	if out, err := blockdevAdd(domain, "own", disks[0]); err != nil {
		t.Fatalf("qemu cannot open its own disk again (the positive control): %v\n%s", err, out)
	}
	out, err := blockdevAdd(domain, "host", canary)
	if err == nil {
		t.Fatalf("qemu opened %s, a host file its command line does not name:\n%s", canary, out)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Fatalf("blockdev-add of %s failed, but not for want of permission:\n%s", canary, out)
	}
	t.Logf("qemu refused %s: %s", canary, strings.TrimSpace(out))
}

// blockdevAdd asks domain's qemu (its QMP monitor, through libvirt) to
// open path read-only as a block node named node.
func blockdevAdd(domain, node, path string) (string, error) {
	cmd, _ := json.Marshal(map[string]any{"execute": "blockdev-add", "arguments": map[string]any{
		"driver": "file", "node-name": node, "filename": path, "read-only": true, "locking": "off",
	}})
	out, err := exec.Command("virsh", "-c", "qemu:///system", "qemu-monitor-command", domain, string(cmd)).CombinedOutput()
	if err == nil && strings.Contains(string(out), `"error"`) { // virsh prints QMP's error reply and exits 0
		err = errors.New("qemu answered with an error")
	}
	return string(out), err
}
