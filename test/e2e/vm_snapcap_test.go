package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSnapshotsAreCapped: with [libvirt] max_snapshots_per_vm = 2, a VM
// takes two snapshots and the third is refused, ResourceExhausted naming
// the cap, until one is deleted. A snapshot of the running VM holds its
// RAM inside the pod's disk (qcow2 internal snapshot: qemu-img lists its
// VM state), and that space is in the container's writable layer as crictl
// stats shows it, which is what kubelet's ephemeral-storage eviction
// reads.
func TestSnapshotsAreCapped(t *testing.T) {
	parallel(t)
	requireVM(t)
	cfg := writeJSON(t, "crimux.toml", "[libvirt]\nmax_snapshots_per_vm = 2\n")
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg", "--config", cfg)
	ctl := ctlBin(t)
	v := startTestVM(t, c, "vm-snapcap")
	disk := filepath.Join(c.stateDir, "pods", strings.TrimPrefix(v.podID, "vm--"), "disk.qcow2")

	before := c.stat(t, v.ctrID).WritableBytes
	start := time.Now()
	c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "s1")
	t.Logf("snapshot of the running VM took %v", time.Since(start).Round(time.Millisecond))
	after := c.stat(t, v.ctrID).WritableBytes
	out, err := exec.Command("qemu-img", "snapshot", "-U", "-l", disk).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "s1") {
		t.Fatalf("qemu-img snapshot -l %s: %v\n%s; want s1 inside the pod's disk", disk, err, out)
	}
	t.Logf("writable layer %d -> %d bytes (+%d MiB); the disk's snapshots:\n%s", before, after, (after-before)>>20, out)
	if after < before+1<<20 {
		t.Fatalf("writable layer grew from %d to %d bytes with a snapshot of the running VM's RAM; want its space counted", before, after)
	}

	c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "s2")
	c.ctlFails(t, ctl, "ResourceExhausted", []string{"the VM has 2 snapshots", "libvirt.max_snapshots_per_vm = 2", "delete one first"},
		"vm", "snapshot", "create", v.ctrID, "s3")
	c.ctlOK(t, ctl, "vm", "snapshot", "delete", v.ctrID, "s1")
	c.ctlOK(t, ctl, "vm", "snapshot", "create", v.ctrID, "s3")
	if list := c.ctlOK(t, ctl, "vm", "snapshot", "list", v.ctrID); strings.Contains(list, "s1") || !strings.Contains(list, "s2") || !strings.Contains(list, "s3") {
		t.Fatalf("snapshots after the refusal and a delete:\n%s\nwant s2 and s3", list)
	}
}
