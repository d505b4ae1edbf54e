package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// criStatus is what crictl inspectp / inspect say of a pod or container,
// but its info (what crimux adds, some of it read live).
func criStatus(t *testing.T, c *crimux, cmd, id string) string {
	t.Helper()
	var v struct {
		Status json.RawMessage `json:"status"`
	}
	mustJSON(t, c.crictl(cmd, "-o", "json", id), &v)
	return string(v.Status)
}

// waitRecordCopies waits until crimux has written the copies of a
// running VM's records (after their commit, on a goroutine of their own).
func waitRecordCopies(t *testing.T, c *crimux, podID, vmID string) {
	t.Helper()
	sid, cid := strings.TrimPrefix(podID, "vm--"), strings.TrimPrefix(vmID, "vm--")
	testutil.Eventually(t, within(t, 10*time.Second), "the record copies", func() error {
		if _, err := store.ReadSandboxCopy(store.SandboxCopyPath(c.stateDir, sid)); err != nil {
			return err
		}
		rec, err := store.ReadContainerCopy(store.ContainerCopyPath(filepath.Join(c.stateDir, "vms", cid)))
		if err == nil && rec.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			err = fmt.Errorf("the VM's copy says %s", rec.State)
		}
		return err
	})
}

// refusedStart runs crimux as c would be started and returns what it
// printed; it fails the test unless crimux exits with an error.
func refusedStart(t *testing.T, c *crimux) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bed.crimuxBin, c.args...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("crimux on a damaged store: %v (deadline: %v)\n%s", err, ctx.Err(), out)
	}
	return string(out)
}

// requireOnlyForeignLeftAlone fails when a rebuild left alone anything
// but the domains of other crimux daemons (other tests' on this libvirtd).
func requireOnlyForeignLeftAlone(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "left alone:") && !strings.Contains(line, "stamped by another crimux identity") {
			t.Fatalf("the rebuild left alone what is not another crimux's:\n%s", out)
		}
	}
}

// configArg is the --config crimux of c runs with.
func configArg(c *crimux) string {
	for i, a := range c.args {
		if a == "--config" && i+1 < len(c.args) {
			return c.args[i+1]
		}
	}
	return ""
}

// TestDamagedStoreRebuilt (make e2e-faults): crimux SIGKILLed under a
// running VM pod, its store cut short: crimux refuses to start, naming the
// file and `crimuxctl store rebuild`; the rebuild moves the store aside
// and proves the pod from its domain and directories; crimux then starts
// and crictl sees the same pod and VM, field for field, the same qemu
// still running, which stop and remove as any, leaving nothing behind.
func TestDamagedStoreRebuilt(t *testing.T) {
	parallel(t)
	requireVM(t)
	ctl := ctlBin(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	podID, vmID := runVM(t, c, "rebuilt", testCgroupParent(t))
	domain := domainOf(vmID)
	pid := qemuPID(t, domain)
	pods, ctrs := podsAndContainers(t, c, "rebuilt") // the bed's containerd holds other tests' pods too
	podStatus, vmStatus := criStatus(t, c, "inspectp", podID), criStatus(t, c, "inspect", vmID)
	waitRecordCopies(t, c, podID, vmID)

	c.kill()
	dbPath := filepath.Join(c.stateDir, store.FileName)
	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(dbPath, fi.Size()/3); err != nil {
		t.Fatal(err)
	}
	out := refusedStart(t, c)
	if !strings.Contains(out, dbPath+" is damaged") || !strings.Contains(out, "crimuxctl store rebuild --state-dir "+c.stateDir) {
		t.Fatalf("crimux's refusal names neither the store nor the way out:\n%s", out)
	}

	start := time.Now()
	res := c.ctl(ctl, "store", "rebuild", "--config", configArg(c), "--state-dir", c.stateDir)
	if res.code != 0 || !strings.Contains(res.stdout, "rebuilt 1 sandboxes, 1 containers;") ||
		!strings.Contains(res.stdout, "moved the damaged store to "+dbPath+".damaged-") {
		t.Fatalf("crimuxctl store rebuild: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	requireOnlyForeignLeftAlone(t, res.stdout)
	t.Logf("crimuxctl store rebuild (%s):\n%s", time.Since(start).Round(time.Millisecond), res.stdout)
	if moved, _ := filepath.Glob(dbPath + ".damaged-*"); len(moved) != 1 {
		t.Fatalf("damaged stores kept: %v", moved)
	} else if kept, _ := os.Stat(moved[0]); kept.Size() != fi.Size()/3 {
		t.Fatalf("the damaged store kept is %d bytes, was %d", kept.Size(), fi.Size()/3)
	}

	c.start()
	testutil.Eventually(t, within(t, 30*time.Second), "the same pod and VM listed", func() error {
		p2, c2 := podsAndContainers(t, c, "rebuilt")
		if fmt.Sprint(p2) != fmt.Sprint(pods) || fmt.Sprint(c2) != fmt.Sprint(ctrs) {
			return fmt.Errorf("pods %v containers %v; before %v %v", p2, c2, pods, ctrs)
		}
		return nil
	})
	if got := qemuPID(t, domain); got != pid {
		t.Fatalf("qemu pid %d, was %d: the VM was recreated", got, pid)
	}
	if got := criStatus(t, c, "inspectp", podID); got != podStatus {
		t.Fatalf("the pod's status changed:\n%s\nwas\n%s", got, podStatus)
	}
	if got := criStatus(t, c, "inspect", vmID); got != vmStatus {
		t.Fatalf("the VM's status changed:\n%s\nwas\n%s", got, vmStatus)
	}

	c.crictl("stopp", podID)
	c.crictl("rmp", podID)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, domain) {
		t.Fatalf("domain %s still defined after rmp:\n%s", domain, out)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("qemu %d still runs after rmp", pid)
	}
	assertNoVMFiles(t, c)
	if left, _ := os.ReadDir(filepath.Join(c.stateDir, "pods")); len(left) != 0 {
		t.Fatalf("pod directories left behind: %v", left)
	}
}
