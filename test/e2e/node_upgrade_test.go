package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// nodeUpgrade: the node runs crimux of upgradeFrom under its unit, with
// that release's own default config (a node of that release), and on it a
// running VM pod with a snapshot and a paused one; then the release
// tarball (make dist, in the node as /root/crimux-release.tar.gz:
// test/node/up.sh) is installed by its install.sh, which keeps the config,
// and `systemctl restart crimux` replaces the binary. Every VM keeps its
// qemu, the paused one its state, the snapshot is listed.
func nodeUpgrade(t *testing.T) {
	old := buildCrimuxAt(t, upgradeFrom)
	if out, err := nodeTry("mkdir -p /tmp/e2e-node/old"); err != nil {
		t.Fatal(out)
	}
	if out, err := runNode("--put", old, "/tmp/e2e-node/old/"); err != nil {
		t.Fatalf("copying crimux %s into the node: %v\n%s", upgradeFrom, err, out)
	}
	nodeRun(t, `systemctl stop crimux
install -m 0755 /tmp/e2e-node/old/crimux-`+upgradeFrom+` /usr/local/bin/crimux
/usr/local/bin/crimux config default >/etc/crimux/config.toml
systemctl start crimux`)
	nodeWait(t, time.Minute, "crimux "+upgradeFrom+"'s VM runtime ready", `crictl info | tr -d ' \n' | grep -q '"status":true,"type":"VMRuntimeReady"'`)

	running := nodeUpgradeVM(t, "up1")
	paused := nodeUpgradeVM(t, "up2")
	nodeRun(t, "crimuxctl vm power "+paused+" paused >/dev/null")
	nodeRun(t, "crimuxctl vm snapshot create "+running+" before-upgrade >/dev/null")
	pids := map[string]string{}
	for _, id := range []string{running, paused} {
		pids[id] = nodeRun(t, "cat /var/run/libvirt/qemu/"+domainOf(id)+".pid")
	}
	before := nodeRun(t, "systemctl show -p MainPID --value crimux")

	timed(t, "upgrade through the unit", `rm -rf /tmp/e2e-node/rel && mkdir /tmp/e2e-node/rel
tar -xzf /root/crimux-release.tar.gz -C /tmp/e2e-node/rel
/tmp/e2e-node/rel/crimux-*/install.sh >/dev/null
systemctl restart crimux`)
	nodeWait(t, time.Minute, "the new crimux's VM runtime ready", `crictl info | tr -d ' \n' | grep -q '"status":true,"type":"VMRuntimeReady"'`)
	if after := nodeRun(t, "systemctl show -p MainPID --value crimux"); after == before {
		t.Fatalf("crimux's pid %s did not change: not restarted", after)
	}
	if got := nodeRun(t, "sha256sum </usr/local/bin/crimux; sha256sum </tmp/e2e-node/rel/crimux-*/bin/crimux"); len(strings.Fields(got)) != 4 ||
		strings.Fields(got)[0] != strings.Fields(got)[2] {
		t.Fatalf("the installed crimux is not the release's:\n%s", got)
	}
	for id, pid := range pids {
		if now := nodeRun(t, "cat /var/run/libvirt/qemu/"+domainOf(id)+".pid"); now != pid {
			t.Errorf("%s: qemu pid %s after the upgrade, was %s", id, now, pid)
		}
	}
	if st := nodeRun(t, "virsh domstate "+domainOf(paused)); st != "paused" {
		t.Errorf("the paused VM is %q after the upgrade", st)
	}
	if out := nodeRun(t, "crimuxctl vm snapshot list "+running); !strings.Contains(out, "before-upgrade") {
		t.Errorf("the snapshot is not listed after the upgrade:\n%s", out)
	}
	nodeRun(t, "crictl rmp -f $(crictl pods -q) >/dev/null")
	nodeWait(t, time.Minute, "the upgrade's VMs gone", `test -z "$(virsh list --all --name)"`)
}

// nodeUpgradeVM runs a VM pod (its slice made as kubelet would) and
// returns its container's ID.
func nodeUpgradeVM(t *testing.T, name string) string {
	t.Helper()
	uid := name + "uid"
	makePodSlice(t, "burstable", uid, nodeVMCgroupMax)
	pod := nodeRun(t, fmt.Sprintf(`cd /tmp/e2e-node && cat >%[1]s.json <<'EOF2'
{"metadata": {"name": "%[1]s", "namespace": "default", "uid": "%[2]s"}, "log_directory": "/tmp/e2e-node",
 "linux": {"cgroup_parent": "kubepods-burstable-pod%[2]s.slice"}}
EOF2
crictl runp --runtime vm %[1]s.json`, name, uid))
	ctr := nodeRun(t, fmt.Sprintf(`cd /tmp/e2e-node && sed 's/"vm.log"/"%[1]s.log"/' vm.json >%[1]s-vm.json && crictl create %[2]s %[1]s-vm.json %[1]s.json`, name, pod))
	nodeRun(t, "crictl start "+ctr+" >/dev/null")
	return ctr
}
