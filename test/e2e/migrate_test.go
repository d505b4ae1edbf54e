package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMMigrate (issue 42): a running VM pod moves, live, from node one
// (the host's libvirtd) to node two (test/bed/node2-up.sh: a libvirtd of
// its own in namespaces of its own, TLS between the two) with crimuxctl
// vm migrate between the two nodes' crimux. A counter in the guest's
// memory goes on from where it was and its uptime with it (moved, not
// rebooted), a file written to its root disk is there, the guest has the
// target pod's address, its qemu runs in the target pod's cgroup as the
// target's own uid; the source's container exited Migrated, its pod
// makes no VM again, and removing it leaves nothing on node one.
func TestVMMigrate(t *testing.T) {
	requireVM(t)
	requireNode2(t)
	n1 := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", migrationConfig(t, 1))
	n2 := startCrimuxOn(t, []string{node2.exec}, "", bed.containerd, "--vm-accel", "tcg",
		"--config", migrationConfig(t, 2), "--cni-conf-dir", node2.cniConfDir)
	n1.crictl("pull", vmAgentImage)
	n2.crictl("pull", vmAgentImage)

	// The source: a VM with a counter in memory and a file on its disk.
	pod1 := vmPodJSON(t, "vm-migrate", testCgroupParent(t), "")
	podID1 := n1.crictl("runp", "--runtime", "vm", pod1)
	t.Cleanup(func() { n1.crictlErr("rmp", "-f", podID1) })
	ctr1 := n1.crictl("create", podID1, vmContainerJSON(t, vmAgentImage, vmMemory, ""), pod1)
	n1.crictl("start", ctr1)
	testutil.Eventually(t, 2*time.Minute, "crictl exec through the source's guest agent", func() error {
		_, err := n1.crictlErr("exec", "-s", ctr1, "true")
		return err
	})
	n1.crictl("exec", ctr1, "sh", "-c", "echo crimux-migrated-disk >/mnt/migrate-file && sync")
	n1.crictl("exec", ctr1, "sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i >/run/count; sleep 0.2; done) </dev/null >/dev/null 2>&1 &")
	time.Sleep(time.Second)
	count1 := guestInt(t, n1, ctr1, "cat", "/run/count")
	uptime1 := guestInt(t, n1, ctr1, "cat", "/proc/uptime")

	// The target: a VM pod on node two that waits for it.
	parent2 := testCgroupParent(t)
	pod2 := vmPodJSON(t, "vm-migrate-target", parent2, `"crimux.io/migrate-from": "crimux-e2e/vm-migrate"`)
	podID2 := n2.crictl("runp", "--runtime", "vm", pod2)
	t.Cleanup(func() { n2.crictlErr("rmp", "-f", podID2) })
	ctr2 := n2.crictl("create", podID2, vmContainerJSON(t, vmAgentImage, vmMemory, ""), pod2)
	n2.crictl("start", ctr2)
	if st := n2.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", ctr2); st != "CONTAINER_RUNNING" {
		t.Fatalf("the waiting target is %s, want CONTAINER_RUNNING", st)
	}
	ip2 := n2.crictl("inspectp", "-o", "go-template", "--template", "{{.status.network.ip}}", podID2)

	start := time.Now()
	res := n1.ctl(ctlBin(t), "vm", "migrate", ctr1, ctr2, "--to", n2.endpoint)
	t.Logf("crimuxctl vm migrate (%v):\n%s%s", time.Since(start).Round(100*time.Millisecond), res.stdout, res.stderr)
	if res.code != 0 {
		t.Fatalf("crimuxctl vm migrate: exit %d", res.code)
	}

	// On node two: the same machine, its memory and disk, the new address.
	dom2 := domainOf(ctr2)
	if out := node2Virsh(t, "domstate", dom2); out != "running" {
		t.Fatalf("node two: %s is %q, want running", dom2, out)
	}
	if count2 := guestInt(t, n2, ctr2, "cat", "/run/count"); count2 <= count1 {
		t.Fatalf("the guest's counter is %v on node two, %v before: not where it was", count2, count1)
	}
	if up2 := guestInt(t, n2, ctr2, "cat", "/proc/uptime"); up2 <= uptime1 {
		t.Fatalf("the guest's uptime is %vs on node two, %vs before: it rebooted", up2, uptime1)
	}
	if out := n2.crictl("exec", ctr2, "cat", "/mnt/migrate-file"); out != "crimux-migrated-disk" {
		t.Fatalf("the file on the root disk reads %q on node two", out)
	}
	if out := n2.crictl("exec", ctr2, "ip", "addr"); !strings.Contains(out, ip2+"/") {
		t.Fatalf("the guest lacks the target pod's address %s:\n%s", ip2, out)
	}
	pid2 := node2QemuPID(t, dom2)
	checkThreadsUnder(t, pid2, parent2)

	// On node one: the container exited Migrated; its pod boots no VM.
	if r := n1.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}} {{.status.reason}}", ctr1); r != "CONTAINER_EXITED Migrated" {
		t.Fatalf("the source's container is %q, want CONTAINER_EXITED Migrated", r)
	}
	if out, err := n1.crictlErr("create", podID1, vmContainerJSON(t, vmAgentImage, vmMemory, ""), pod1); err == nil || !strings.Contains(out, "moved to another node") {
		t.Fatalf("a new container in the migrated pod: %v, %q; want refused, its VM moved", err, out)
	}
	dom1 := domainOf(ctr1)
	n1.crictl("rmp", "-f", podID1)
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, dom1) {
		t.Fatalf("node one still has domain %s after its pod went:\n%s", dom1, out)
	}
	if entries, _ := os.ReadDir(n1.stateDir + "/vms"); len(entries) != 0 {
		t.Fatalf("node one keeps VM dirs after its pod went: %v", entries)
	}
}
