package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMMigrate: a running VM pod moves, live, from node one (the host's
// libvirtd) to node two (test/bed/node2-up.sh: a libvirtd of its own in
// namespaces of its own, TLS between the two) with crimuxctl vm migrate
// between the two nodes' crimux. A counter in the guest's memory goes on
// from where it was and its uptime with it (moved, not rebooted), a file
// written to its root disk is there, the guest has the target pod's
// address, its qemu runs in the target pod's cgroup; the source's
// container exited Migrated, its pod makes no VM again, and removing it
// leaves nothing on node one. Before it, node two refuses descriptions of
// the VM that node one did not seal as they are.
func TestVMMigrate(t *testing.T) {
	g := newMigrationRig(t, "")
	g.requireForgedSourceRefused(t)
	start := time.Now()
	res := g.n1.ctl(ctlBin(t), "vm", "migrate", g.ctr1, g.ctr2, "--to", g.n2.endpoint)
	t.Logf("crimuxctl vm migrate (%v):\n%s%s", time.Since(start).Round(100*time.Millisecond), res.stdout, res.stderr)
	if res.code != 0 {
		t.Fatalf("crimuxctl vm migrate: exit %d", res.code)
	}
	if m := downtimeRE.FindStringSubmatch(res.stdout); m == nil || m[1] == "0" {
		t.Fatalf("crimuxctl vm migrate reports no downtime from libvirt (a switch-over always pauses): %q", m)
	}

	// On node two: the same machine, its memory and disk, the new address.
	dom2 := domainOf(g.ctr2)
	if out := node2Virsh(t, "domstate", dom2); out != "running" {
		t.Fatalf("node two: %s is %q, want running", dom2, out)
	}
	g.requireSameMachine(t, g.n2, g.ctr2)
	if out := g.n2.crictl("exec", g.ctr2, "ip", "addr"); !strings.Contains(out, g.ip2+"/") {
		t.Fatalf("the guest lacks the target pod's address %s:\n%s", g.ip2, out)
	}
	checkThreadsUnder(t, node2QemuPID(t, dom2), g.parent2)

	// On node one: the container exited Migrated; its pod boots no VM.
	if r := containerStateReason(t, g.n1, g.ctr1); r != "CONTAINER_EXITED Migrated" {
		t.Fatalf("the source's container is %q, want CONTAINER_EXITED Migrated", r)
	}
	if out, err := g.n1.crictlErr("create", g.podID1, vmContainerJSON(t, vmAgentImage, vmMemory, ""), g.pod1); err == nil || !strings.Contains(out, "moved to another node") {
		t.Fatalf("a new container in the migrated pod: %v, %q; want refused, its VM moved", err, out)
	}
	dom1 := domainOf(g.ctr1)
	g.n1.crictl("rmp", "-f", g.podID1)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, dom1) {
		t.Fatalf("node one still has domain %s after its pod went:\n%s", dom1, out)
	}
	requireNoVMDirs(t, g.n1)
}

// TestVMMigrateTargetKilled: the target's crimux is SIGKILLed
// in the middle of a migration (its memory stream capped at 2 MiB/s, so
// there is a middle): the VM runs on on node one as it was, the target
// pod's container exits MigrationFailed once its crimux is back, and
// removing it leaves nothing of the VM on node two.
func TestVMMigrateTargetKilled(t *testing.T) {
	g := newMigrationRig(t, "bandwidth_mib = 2\n")
	run := g.startMigrate(t)
	g.n2.kill()
	res := run.wait()
	t.Logf("crimuxctl vm migrate, its target killed: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	if res.code == 0 {
		t.Fatal("crimuxctl vm migrate succeeded with its target's crimux killed")
	}
	g.requireStillOnSource(t)
	g.n2.start()
	testutil.Eventually(t, 30*time.Second, "the target exits MigrationFailed", func() error {
		if r := containerStateReason(t, g.n2, g.ctr2); r != "CONTAINER_EXITED MigrationFailed" {
			return fmt.Errorf("the target's container is %q", r)
		}
		return nil
	})
	g.requireNothingOnNode2(t)
}

// TestVMMigrateLinkCut: the link between the nodes goes down in the middle
// of a migration: node one's crimux aborts it once no byte has moved for
// its progress timeout (5 s here), the VM runs on on node one as it was,
// crimuxctl tells the target, whose container exits MigrationFailed, and
// removing it leaves nothing on node two.
func TestVMMigrateLinkCut(t *testing.T) {
	g := newMigrationRig(t, "bandwidth_mib = 2\nprogress_timeout = \"5s\"\n")
	run := g.startMigrate(t)
	if out, err := exec.Command("ip", "link", "set", "crimux-n2", "down").CombinedOutput(); err != nil {
		t.Fatalf("cut the link: %v\n%s", err, out)
	}
	linkUp := func() { _ = exec.Command("ip", "link", "set", "crimux-n2", "up").Run() }
	t.Cleanup(linkUp)
	res := run.wait()
	t.Logf("crimuxctl vm migrate, the link cut: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	if res.code == 0 {
		t.Fatal("crimuxctl vm migrate succeeded with the link cut")
	}
	linkUp()
	g.requireStillOnSource(t)
	if r := containerStateReason(t, g.n2, g.ctr2); r != "CONTAINER_EXITED MigrationFailed" {
		t.Fatalf("the target's container is %q, want CONTAINER_EXITED MigrationFailed", r)
	}
	g.requireNothingOnNode2(t)
}

// downtimeRE is crimuxctl's downtime, as libvirt measured it.
var downtimeRE = regexp.MustCompile(`migrated: downtime ([0-9]+) ms`)

// requireNoVMDirs: c keeps no VM directory.
func requireNoVMDirs(t *testing.T, c *crimux) {
	t.Helper()
	if entries, _ := os.ReadDir(c.stateDir + "/vms"); len(entries) != 0 {
		t.Fatalf("VM dirs left in %s: %v", c.stateDir, entries)
	}
}
