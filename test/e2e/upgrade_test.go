package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// upgradeFrom is the commit the upgrade test starts from: the last crimux
// before per-VM identities, named backing chains and the store's format
// version.
const upgradeFrom = "c78de64"

// buildCrimuxAt builds crimux as it was at commit, from this repository's
// history (a worktree of its own); the test skips where the history does
// not reach it (a shallow clone).
func buildCrimuxAt(t *testing.T, commit string) string {
	t.Helper()
	repo := repoRoot()
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone's history (shallow?): %v", commit, err)
	}
	wt := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("git", "-C", repo, "worktree", "add", "--detach", wt, commit).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s: %v\n%s", commit, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("git", "-C", repo, "worktree", "remove", "--force", wt).Run() })
	bin := filepath.Join(t.TempDir(), "crimux-"+commit)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/crimux")
	cmd.Dir = wt
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build crimux at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// TestUpgradeKeepsEveryVM: a crimux of an earlier commit runs
// a VM pod that is running, one that is paused, one with a snapshot, and
// a container pod; it is replaced by this crimux on the same state dir
// and socket (what the unit's restart after install.sh does). Every VM
// keeps its qemu process and its power state, the snapshot is listed, the
// container runs on. The old pods keep libvirt's shared qemu user; a new
// container in one of them (kubelet's restart) gets an identity of its
// own and boots the pod's root disk, which the older record names without
// its backing file (checked against the image cache). The store now says
// its format; started again, the old crimux, which knows no format, still
// reads it (a downgrade loses nothing it knew).
func TestUpgradeKeepsEveryVM(t *testing.T) {
	parallel(t)
	requireVM(t)
	old := buildCrimuxAt(t, upgradeFrom)
	c := startVMAPICrimuxWith(t, old)
	ctl := ctlBin(t)
	running := startTestVM(t, c, "upgrade-running")
	paused := startTestVM(t, c, "upgrade-paused")
	snap := startTestVM(t, c, "upgrade-snapshot")
	c.ctlOK(t, ctl, "vm", "power", paused.ctrID, "paused")
	c.ctlOK(t, ctl, "vm", "snapshot", "create", snap.ctrID, "before-upgrade")
	ctrPod := c.crictl("runp", writeJSON(t, "ctrpod.json", `{"metadata": {"name": "upgrade-ctr", "namespace": "crimux-e2e", "uid": "upgrade-ctr-1"}}`))
	t.Cleanup(func() { c.crictlErr("rmp", "-f", ctrPod) })
	pids := map[string]int{}
	for _, v := range []*testVM{running, paused, snap} {
		pids[v.domain] = qemuPID(t, v.domain)
	}

	// The upgrade: the new binary on the same state dir and socket.
	c.kill()
	c.bin, c.args = "", upgradedArgs(c.args)
	fmt.Fprintf(c.logs, "---- upgraded ----\n")
	c.start()
	for _, v := range []*testVM{running, paused, snap} {
		if pid := qemuPID(t, v.domain); pid != pids[v.domain] {
			t.Errorf("%s: qemu pid %d after the upgrade, was %d", v.domain, pid, pids[v.domain])
		}
	}
	if st := strings.TrimSpace(virsh(t, "domstate", paused.domain)); st != "paused" {
		t.Errorf("the paused VM is %q after the upgrade", st)
	}
	if out := c.ctlOK(t, ctl, "vm", "get", paused.ctrID); !strings.Contains(out, "Paused") {
		t.Errorf("crimuxctl vm get of the paused VM after the upgrade:\n%s", out)
	}
	if out := c.ctlOK(t, ctl, "vm", "snapshot", "list", snap.ctrID); !strings.Contains(out, "before-upgrade") {
		t.Errorf("the snapshot is not listed after the upgrade:\n%s", out)
	}
	if out := c.crictl("pods", "-q", "--id", ctrPod); !strings.Contains(out, ctrPod) {
		t.Errorf("the container pod is gone after the upgrade")
	}

	// kubelet restarts the running VM's container: a new VM of the same
	// pod, booting its root disk, now as an identity of its own.
	c.crictl("stop", running.ctrID)
	pod := vmPodJSON(t, "upgrade-running", testCgroupParent(t), "")
	next := c.crictl("create", running.podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	c.crictl("start", next)
	id := identityOf(t, qemuPID(t, domainOf(next)))
	t.Logf("upgraded from %s: 3 VMs kept their qemu (pids %v); the old pod's new VM runs as %+v", upgradeFrom, pids, id)
	if id.uid == 0 || id.uid == qemuUserUID(t) {
		t.Errorf("the old pod's new VM runs as %+v, want an identity of its own", id)
	}
	if pid := qemuPID(t, paused.domain); pid != pids[paused.domain] {
		t.Errorf("the paused VM's qemu changed: %d, was %d", pid, pids[paused.domain])
	}

	// Back to the old binary: it ignores the format it does not know.
	c.kill()
	c.bin, c.args = old, downgradedArgs(c.args)
	c.start()
	if out := c.crictl("ps", "-q"); !strings.Contains(out, snap.ctrID) {
		t.Errorf("the old crimux, started again, does not list the VMs:\n%s", out)
	}
	c.kill()
	c.bin, c.args = "", upgradedArgs(c.args)
	c.start()
}

// upgradedArgs are the old crimux's arguments as this one takes them
// (the same: only --listen is written the way kubelet writes it).
func upgradedArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if i > 0 && out[i-1] == "--listen" && strings.HasPrefix(out[i], "/") {
			out[i] = "unix://" + out[i]
		}
	}
	return out
}

// downgradedArgs: an older crimux takes --listen as a path only.
func downgradedArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if i > 0 && out[i-1] == "--listen" {
			out[i] = strings.TrimPrefix(out[i], "unix://")
		}
	}
	return out
}
