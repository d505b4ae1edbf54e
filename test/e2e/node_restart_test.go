package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// crimux under systemd while the VM of TestNode runs: whatever happens to
// crimux, the VM's qemu keeps its pid and the pod its ID and state.

func crimuxMainPID(t *testing.T) string {
	t.Helper()
	return nodeRun(t, "systemctl show -p MainPID --value crimux")
}

// waitNewCrimux waits until systemd runs a crimux other than old, and it
// serves.
func waitNewCrimux(t *testing.T, old string, timeout time.Duration) string {
	t.Helper()
	start := time.Now()
	pid := nodeWait(t, timeout, "crimux restarted", fmt.Sprintf(
		`p=$(systemctl show -p MainPID --value crimux); [ "$p" != 0 ] && [ "$p" != %s ] && systemctl is-active -q crimux && echo $p`, old))
	t.Logf("TIME crimux back (new pid %s): %.1fs", pid, time.Since(start).Seconds())
	return pid
}

// checkVMKept checks that the VM's qemu is the same process and the pod
// and container are as before.
func checkVMKept(t *testing.T) {
	t.Helper()
	if pid := nodeRun(t, "pgrep -x qemu-system-x86 || true"); pid != nodeVM.qemuPID {
		t.Fatalf("qemu pid %q, want %s (the same process)", pid, nodeVM.qemuPID)
	}
	st := nodeRun(t, "crictl inspect -o go-template --template '{{.status.state}}' "+nodeVM.ctr)
	if st != "CONTAINER_RUNNING" {
		t.Fatalf("the VM container is %s", st)
	}
	if out := nodeRun(t, "crictl pods -q"); !strings.Contains(out, nodeVM.pod) {
		t.Fatalf("pod %s missing from crictl pods: %s", nodeVM.pod, out)
	}
}

func nodeKill(t *testing.T) {
	old := crimuxMainPID(t)
	nodeRun(t, "systemctl kill -s KILL crimux")
	waitNewCrimux(t, old, time.Minute)
	checkVMKept(t)
}

func nodeReload(t *testing.T) {
	pid := crimuxMainPID(t)
	since := nodeRun(t, "date +%s")
	nodeRun(t, "systemctl reload crimux")
	nodeWait(t, 30*time.Second, "config reloaded", fmt.Sprintf("journalctl -u crimux --since @%s --no-pager | grep -q 'config reloaded'", since))
	if now := crimuxMainPID(t); now != pid {
		t.Fatalf("reload restarted crimux (%s -> %s)", pid, now)
	}
	checkVMKept(t)
	nodeReloadRefused(t, pid)
}

// nodeReloadRefused: systemctl reload with listen changed in the config
// file fails (the unit's ExecReload, crimux reload, exits non-zero), the
// journal names the key, and crimux serves on as it was, same pid, same
// socket.
func nodeReloadRefused(t *testing.T, pid string) {
	since := nodeRun(t, "date +%s")
	out := nodeRun(t, `cp /etc/crimux/config.toml /tmp/crimux-config.bak &&
sed -i 's|^listen = .*|listen = "/run/crimux/elsewhere.sock"|' /etc/crimux/config.toml &&
grep -q '^listen = "/run/crimux/elsewhere.sock"' /etc/crimux/config.toml || exit 9
if systemctl reload crimux >/dev/null 2>&1; then rc=0; else rc=$?; fi
cp /tmp/crimux-config.bak /etc/crimux/config.toml
echo "rc=$rc"`)
	if out != "rc=1" {
		t.Fatalf("systemctl reload with listen changed: %s; want it to fail (rc=1)", out)
	}
	if j := nodeRun(t, fmt.Sprintf("journalctl -u crimux --since @%s --no-pager", since)); !strings.Contains(j, "listen cannot change while crimux runs") {
		t.Fatalf("the journal does not name listen after the refused reload:\n%s", tail(j, 20))
	}
	if now := crimuxMainPID(t); now != pid {
		t.Fatalf("the refused reload restarted crimux (%s -> %s)", pid, now)
	}
	nodeRun(t, "crictl version >/dev/null && test -S /run/crimux/crimux.sock && ! test -e /run/crimux/elsewhere.sock")
	checkVMKept(t)
}

func nodeStop(t *testing.T) {
	nodeRun(t, "systemctl stop crimux")
	if st := nodeRun(t, "systemctl is-active crimux || true"); st != "inactive" {
		t.Fatalf("crimux is %s after stop", st)
	}
	if pid := nodeRun(t, "pgrep -x qemu-system-x86 || true"); pid != nodeVM.qemuPID {
		t.Fatalf("qemu pid %q with crimux stopped, want %s", pid, nodeVM.qemuPID)
	}
	if out := nodeRun(t, "virsh list --name --state-running"); !strings.Contains(out, "crimux-") {
		t.Fatalf("no VM runs with crimux stopped: %q", out)
	}
	nodeRun(t, "systemctl start crimux")
	checkVMKept(t)
}

func nodeWatchdog(t *testing.T) {
	old := crimuxMainPID(t)
	since := nodeRun(t, "date +%s")
	nodeRun(t, "kill -STOP "+old)
	// WatchdogSec=30s, RestartSec=2s.
	waitNewCrimux(t, old, 90*time.Second)
	if r := nodeRun(t, "journalctl --since @"+since+" --no-pager | grep 'crimux.service: Watchdog timeout' || true"); r == "" {
		t.Errorf("crimux restarted, but systemd logged no watchdog timeout")
	}
	checkVMKept(t)
}

func nodeVMRemove(t *testing.T) {
	timed(t, "VM rmp", "crictl rmp -f "+nodeVM.pod)
	left := nodeRun(t, `virsh list --all --name | grep . || true
find /sys/fs/cgroup -name 'crimux-[0-9a-f]*'
systemctl list-units --all --no-legend 'crimux-*.scope'
ls -A /var/lib/crimux/pods /var/lib/crimux/vms | grep -v ':$' | grep . || true
pgrep -x qemu-system-x86 || true`)
	if left != "" {
		t.Fatalf("left after rmp:\n%s", left)
	}
}
