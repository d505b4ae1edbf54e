package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// leafOf is the cgroup path (the same in every hierarchy: crimux makes
// it so) that a VM's qemu runs in: <pod parent>/<domain>.
func leafOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && strings.HasPrefix(filepath.Base(parts[2]), "crimux-") {
			return parts[2]
		}
	}
	t.Fatalf("qemu pid %d is in no VM leaf:\n%s", pid, b)
	return ""
}

// leafState is what a VM's leaf holds: its processes and its limits, in
// every hierarchy.
func leafState(leaf string) string {
	var out []string
	for _, d := range cgroupDirs(leaf) {
		for _, f := range []string{"cgroup.procs", "memory.limit_in_bytes", "memory.max", "cpu.cfs_quota_us", "cpu.max"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				out = append(out, filepath.Join(d, f)+"="+strings.Join(strings.Fields(string(b)), " "))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// runAsCompromisedQemu runs the qemu wrapper as A's qemu runs (idA: its
// uid, gid and groups, no capabilities) from inside the cgroup of VM A's
// qemu (leafA), as a compromised qemu of A would, naming domain; it
// returns the wrapper's exit error and output.
func runAsCompromisedQemu(t *testing.T, wrapper string, idA identity, leafA, domain string) (string, error) {
	t.Helper()
	var joins []string
	for _, d := range cgroupDirs(leafA) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			joins = append(joins, fmt.Sprintf("echo $$ > %s/cgroup.procs", d))
		}
	}
	groups := make([]string, len(idA.groups))
	for i, g := range idA.groups {
		groups[i] = fmt.Sprint(g)
	}
	groupFlag := "--clear-groups"
	if len(groups) > 0 {
		groupFlag = "--groups=" + strings.Join(groups, ",")
	}
	script := strings.Join(joins, " && ") + fmt.Sprintf(" && exec setpriv --reuid=%d --regid=%d %s --inh-caps=-all --bounding-set=-all -- %s -name guest=%s,debug-threads=on -version",
		idA.uid, idA.gid, groupFlag, wrapper, domain)
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestHostileNeighbour: two VM pods A and B run; the qemu wrapper, run as
// A's qemu from inside A's cgroup with B's domain name (what a compromised
// qemu of A can do), is refused: it is not placed in B's cgroup, B's
// processes and limits do not change, and it is handed nothing (B's tap,
// B's pod traffic). Again while B is hibernated, when no qemu of B holds
// its place.
func TestHostileNeighbour(t *testing.T) {
	parallel(t)
	c := startVMAPICrimux(t)
	a := startTestVM(t, c, "hostile-a")
	b := startTestVM(t, c, "hostile-b")
	leafA, leafB := leafOf(t, qemuPID(t, a.domain)), leafOf(t, qemuPID(t, b.domain))
	idA := identityOf(t, qemuPID(t, a.domain))
	before := leafState(leafB)

	out, err := runAsCompromisedQemu(t, c.wrapper, idA, leafA, b.domain)
	t.Logf("the wrapper as A's qemu naming B: %v: %s", err, out)
	if err == nil || !strings.Contains(out, "refused") && !strings.Contains(out, "placement") {
		t.Fatalf("the wrapper run from A's cgroup with B's name was not refused: %v: %s", err, out)
	}
	if strings.Contains(out, "QEMU emulator version") {
		t.Fatal("qemu ran: the wrapper was placed")
	}
	if after := leafState(leafB); after != before {
		t.Fatalf("B's cgroup changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if pid := qemuPID(t, b.domain); leafOf(t, pid) != leafB {
		t.Fatalf("B's qemu (pid %d) left its cgroup", pid)
	}

	c.ctlOK(t, ctlBin(t), "vm", "power", b.ctrID, "hibernate")
	beforeHibernated := leafState(leafB)
	out, err = runAsCompromisedQemu(t, c.wrapper, idA, leafA, b.domain)
	t.Logf("the wrapper as A's qemu naming hibernated B: %v: %s", err, out)
	if err == nil || strings.Contains(out, "QEMU emulator version") {
		t.Fatalf("the wrapper naming hibernated B was not refused: %v: %s", err, out)
	}
	if after := leafState(leafB); after != beforeHibernated {
		t.Fatalf("hibernated B's cgroup changed:\nbefore:\n%s\nafter:\n%s", beforeHibernated, after)
	}
}

// writableLayer is what crictl stats reports of a container's writable
// layer, in bytes.
func writableLayer(t *testing.T, c *crimux, id string) uint64 {
	t.Helper()
	return c.stat(t, id).WritableBytes
}

// TestDiskGrowthIsTheWritableLayer (the disk bomb's other half): what
// the guest writes to its disk grows its overlay, which crictl stats (and
// so kubelet's ephemeral-storage eviction) sees as the container's
// writable layer.
func TestDiskGrowthIsTheWritableLayer(t *testing.T) {
	parallel(t)
	c := startVMAPICrimux(t)
	v := startTestVM(t, c, "disk-growth")
	before := writableLayer(t, c, v.ctrID)
	// The write runs in the background: a loaded host may take long to
	// flush it, and typing the line again (^C first) would kill it.
	// Started once however often the line is typed; polled until done.
	// Zeros, not /dev/urandom: the guest makes those slowly under TCG and
	// its console waits behind it (here the test took 55 s with them, 8.5 s
	// with zeros); the disk has no detect_zeroes, so zeros are data.
	v.guestRun(t, "[ -e /mnt/fill.started ] || { touch /mnt/fill.started; "+
		"(dd if=/dev/zero of=/mnt/fill bs=1M count=8 2>/dev/null && sync && echo ok >/mnt/fill.done || echo failed >/mnt/fill.done) & }")
	testutil.Eventually(t, within(t, 2*time.Minute), "the guest wrote and synced 8 MiB", func() error {
		if out := v.guestRun(t, "cat /mnt/fill.done"); !strings.HasPrefix(out, "0:") {
			return fmt.Errorf("not yet: %s", out)
		}
		if out := v.guestOutput(t, "cat /mnt/fill.done"); out != "ok" {
			t.Fatalf("the guest could not write 8 MiB to its disk: %s", out)
		}
		return nil
	})
	testutil.Eventually(t, within(t, 30*time.Second), "the writable layer grown by the 8 MiB written", func() error {
		if after := writableLayer(t, c, v.ctrID); after < before+8<<20 {
			return fmt.Errorf("writable layer %d bytes, was %d", after, before)
		}
		return nil
	})
	t.Logf("writable layer %d bytes before, %d after the guest wrote 8 MiB", before, writableLayer(t, c, v.ctrID))
}
