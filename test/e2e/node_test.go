package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestNode runs crimux on a cgroup v2 node with systemd as init and the
// systemd cgroup driver (test/node), through crictl: a container pod and a
// VM pod in kubelet's pod slices, then crimux killed, reloaded, stopped and
// frozen under systemd while the VM runs. The steps share the node and run
// in order; make e2e-node counts them.
func TestNode(t *testing.T) {
	requireNode(t)
	nodeRun(t, "rm -rf /tmp/e2e-node && mkdir -p /tmp/e2e-node/c1 /tmp/e2e-node/v1")
	runSteps(t, []step{
		{"node is cgroup v2 with systemd and the systemd driver", nodeIsSystemdV2},
		{"container pod in a systemd slice", nodeContainerPod},
		{"VM pod in the pod slice with its limits", nodeVMPod},
		{"VM limits survive systemctl daemon-reload", nodeVMSurvivesDaemonReload},
		{"crictl stats shows the VM's CPU", nodeVMStats},
		{"crictl update changes cpu.max", nodeVMUpdate},
		{"hibernate and resume: the new qemu in the scope again", nodeVMHibernate},
		{"systemctl kill -s KILL: restarted, qemu kept", nodeKill},
		{"systemctl reload re-reads the config", nodeReload},
		{"systemctl stop leaves the VM running", nodeStop},
		{"the watchdog restarts a frozen crimux", nodeWatchdog},
		{"rmp leaves no cgroup, scope, domain or disk", nodeVMRemove},
		{"upgrade from " + upgradeFrom + " through the unit keeps every VM", nodeUpgrade},
	})
}

func nodeIsSystemdV2(t *testing.T) {
	if fs := nodeRun(t, "stat -fc %T /sys/fs/cgroup"); fs != "cgroup2fs" {
		t.Fatalf("/sys/fs/cgroup is %s, not cgroup2fs", fs)
	}
	if kvm := nodeRun(t, "ls /dev/kvm 2>/dev/null || true"); kvm != "" {
		t.Fatalf("/dev/kvm exists in the node: crimux's accel auto would pick kvm (test/node's modprobe.d)")
	}
	if init := nodeRun(t, "cat /proc/1/comm"); init != "systemd" {
		t.Fatalf("pid 1 is %s", init)
	}
	nodeWait(t, time.Minute, "crimux active", "systemctl is-active crimux containerd libvirtd")
	if out := nodeRun(t, "crictl runtime-config"); !strings.Contains(out, "SYSTEMD") {
		t.Fatalf("crictl runtime-config: %s; want the systemd driver (containerd's)", out)
	}
	if c := nodeRun(t, "systemctl show -p Type,WatchdogUSec,KillMode crimux"); !strings.Contains(c, "Type=notify") ||
		!strings.Contains(c, "KillMode=process") || !strings.Contains(c, "WatchdogUSec=30s") {
		t.Fatalf("crimux's unit: %s", c)
	}
	nodeWait(t, time.Minute, "VM runtime ready", `crictl info | tr -d ' \n' | grep -q '"status":true,"type":"VMRuntimeReady"'`)
}

func nodeContainerPod(t *testing.T) {
	nodeRun(t, `cd /tmp/e2e-node && cat >c1.json <<'EOF2'
{"metadata": {"name": "c1", "namespace": "default", "uid": "c1uid"}, "log_directory": "/tmp/e2e-node/c1",
 "linux": {"cgroup_parent": "kubepods-besteffort-podc1uid.slice"}}
EOF2
cat >sleeper.json <<'EOF2'
{"metadata": {"name": "sleeper"}, "image": {"image": "127.0.0.1:5117/crimux/busybox:latest"},
 "command": ["sleep", "3600"], "log_path": "sleeper.log"}
EOF2
crictl pull 127.0.0.1:5117/crimux/busybox:latest >/dev/null`)
	pod := timed(t, "container runp", "crictl runp /tmp/e2e-node/c1.json")
	ctr := nodeRun(t, fmt.Sprintf("cd /tmp/e2e-node && c=$(crictl create %s sleeper.json c1.json) && crictl start $c >/dev/null && echo $c", pod))
	if out := nodeRun(t, "crictl exec "+ctr+" echo exec-works"); out != "exec-works" {
		t.Fatalf("crictl exec: %q", out)
	}
	cg := nodeRun(t, fmt.Sprintf("cat /proc/$(crictl inspect -o go-template --template '{{.info.pid}}' %s)/cgroup", ctr))
	want := "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podc1uid.slice/cri-containerd-" + ctr + ".scope"
	if cg != want {
		t.Fatalf("the container's cgroup: %q, want %q", cg, want)
	}
	nodeRun(t, "crictl rmp -f "+pod+" >/dev/null")
	if out := nodeRun(t, "crictl pods -q; systemctl list-units --no-legend 'cri-containerd-*'"); out != "" {
		t.Fatalf("left after rmp: %s", out)
	}
}
