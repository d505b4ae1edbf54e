package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMMigrateDurable: a durable VM (its root disk on a block volume,
// crimux.io/root-disk) moves live from node one to node two with its
// volume shared, not copied: a loop device both nodes reach at one path,
// as a SAN LUN or a Ceph RBD image of a ReadWriteMany claim would be. The
// target pod names the same volume; its log says the VM arrives on it,
// nothing imported. On node two the counter went on, the file is there,
// and what the guest writes there lands on the volume: the next pod on
// node one, on the same volume, boots that disk as it is (no import) and
// reads it.
func TestVMMigrateDurable(t *testing.T) {
	requireNode2(t)
	vol := blockVolume(t, 64<<20) // /dev is one devtmpfs: node two sees the device at the same path
	g := newMigrationRigOf(t, "", func() string { return durableContainerJSONOf(t, vmAgentImage, vol, 0) })
	if notes := crimuxNotes(t, g.n2, g.ctr2); !strings.Contains(notes, "the VM arriving by live migration runs on it, shared with its source, not copied") ||
		strings.Contains(notes, "importing") {
		t.Fatalf("the target's log does not say the VM arrives on the volume as it is:\n%s", notes)
	}
	res := g.n1.ctl(ctlBin(t), "vm", "migrate", g.ctr1, g.ctr2, "--to", g.n2.endpoint)
	t.Logf("crimuxctl vm migrate:\n%s%s", res.stdout, res.stderr)
	if res.code != 0 {
		t.Fatalf("crimuxctl vm migrate: exit %d", res.code)
	}
	g.requireSameMachine(t, g.n2, g.ctr2)
	g.n2.crictl("exec", g.ctr2, "sh", "-c", "echo written-on-node-two >/mnt/after-move && sync")

	// Node two's VM goes; node one's migrated pod too, leaving the volume.
	g.n2.crictl("rmp", "-f", g.podID2)
	g.n1.crictl("rmp", "-f", g.podID1)
	checkRootsOnly(t, vol)
	requireNoVMDirs(t, g.n1)

	pod := vmPodJSON(t, "vm-durable-back", testCgroupParent(t), "")
	podID := g.n1.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { g.n1.crictlErr("rmp", "-f", podID) })
	ctr := g.n1.crictl("create", podID, durableContainerJSONOf(t, vmAgentImage, vol, 0), pod)
	if notes := crimuxNotes(t, g.n1, ctr); !strings.Contains(notes, "booting it as it is") {
		t.Fatalf("the next pod on node one imports again:\n%s", notes)
	}
	g.n1.crictl("start", ctr)
	testutil.Eventually(t, 2*time.Minute, "crictl exec in the next VM on the volume", func() error {
		_, err := g.n1.crictlErr("exec", "-s", ctr, "true")
		return err
	})
	for file, want := range map[string]string{"/mnt/after-move": "written-on-node-two", "/mnt/migrate-file": "crimux-migrated-disk"} {
		if out := g.n1.crictl("exec", ctr, "cat", file); out != want {
			t.Fatalf("the next VM on the volume reads %q from %s, want %q", out, file, want)
		}
	}
}
