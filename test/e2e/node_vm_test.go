package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The VM pod of TestNode: its limits, and what systemd may do around it.
const (
	nodeVMUID       = "v1uid"
	nodeVMMemLimit  = 512 << 20
	nodeVMOverhead  = 256 << 20 // memory_overhead_mib's default
	nodeVMCgroupMax = nodeVMMemLimit + nodeVMOverhead
)

var nodeVM struct{ pod, ctr, scope, qemuPID string }

func nodeVMPod(t *testing.T) {
	makePodSlice(t, "burstable", nodeVMUID, nodeVMCgroupMax)
	nodeRun(t, fmt.Sprintf(`cd /tmp/e2e-node && cat >v1.json <<'EOF2'
{"metadata": {"name": "v1", "namespace": "default", "uid": "%s"}, "log_directory": "/tmp/e2e-node/v1",
 "linux": {"cgroup_parent": "kubepods-burstable-pod%s.slice"}}
EOF2
cat >vm.json <<'EOF2'
{"metadata": {"name": "vm"}, "image": {"image": "127.0.0.1:5117/crimux/vm-busybox:latest"}, "log_path": "vm.log",
 "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 50000, "cpu_shares": 512, "memory_limit_in_bytes": %d}}}
EOF2
crictl pull 127.0.0.1:5117/crimux/vm-busybox:latest >/dev/null`, nodeVMUID, nodeVMUID, nodeVMMemLimit))
	nodeVM.pod = timed(t, "VM runp", "crictl runp --runtime vm /tmp/e2e-node/v1.json")
	nodeVM.ctr = timed(t, "VM create", fmt.Sprintf("cd /tmp/e2e-node && crictl create %s vm.json v1.json", nodeVM.pod))
	timed(t, "VM start", "crictl start "+nodeVM.ctr)
	domain := "crimux-" + strings.TrimPrefix(nodeVM.ctr, "vm--")
	nodeVM.scope = podSlicePath("burstable", nodeVMUID) + "/" + domain + ".scope"
	nodeVM.qemuPID = nodeRun(t, "pgrep -x qemu-system-x86")
	checkQemuInScope(t)
	checkVMLimits(t, "50000 100000")
	if w := nodeFile(t, nodeVM.scope+"/cpu.weight"); w == "100" || w == "" {
		t.Errorf("cpu.weight %q: shares 512 should weigh less than the default 100", w)
	}
	if u := nodeRun(t, "systemctl show -p LoadState,ActiveState "+domain+".scope"); !strings.Contains(u, "ActiveState=active") {
		t.Errorf("the VM's scope unit: %s", u)
	}
}

// checkQemuInScope checks that every thread of the VM's qemu is in the
// VM's scope in the pod's slice.
func checkQemuInScope(t *testing.T) {
	t.Helper()
	threads := nodeRun(t, fmt.Sprintf("for t in /proc/%s/task/*; do cat $t/cgroup; done | sort | uniq -c", nodeVM.qemuPID))
	want := "0::" + strings.TrimPrefix(nodeVM.scope, "/sys/fs/cgroup")
	if lines := strings.Split(threads, "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], " "+want) {
		t.Fatalf("qemu's threads are in:\n%s\nwant all in %s", threads, want)
	}
	t.Logf("qemu %s: %s", nodeVM.qemuPID, threads)
}

func checkVMLimits(t *testing.T, cpuMax string) {
	t.Helper()
	if got := nodeFile(t, nodeVM.scope+"/cpu.max"); got != cpuMax {
		t.Errorf("cpu.max %q, want %q", got, cpuMax)
	}
	if got := atoi(t, nodeFile(t, nodeVM.scope+"/memory.max")); got != nodeVMCgroupMax {
		t.Errorf("memory.max %d, want %d (the limit and qemu's overhead)", got, nodeVMCgroupMax)
	}
}

func nodeVMSurvivesDaemonReload(t *testing.T) {
	nodeRun(t, "systemctl daemon-reload")
	nodeRun(t, fmt.Sprintf("systemctl set-property --runtime kubepods-burstable-pod%s.slice CPUWeight=90", nodeVMUID))
	time.Sleep(time.Second)
	checkVMLimits(t, "50000 100000")
}

func nodeVMStats(t *testing.T) {
	out := nodeRun(t, "crictl stats -o json "+nodeVM.ctr+" | tr -d ' \\n'")
	i := strings.Index(out, `"usageCoreNanoSeconds":{"value":"`)
	if i < 0 {
		t.Fatalf("no CPU usage in crictl stats: %s", out)
	}
	v := out[i+len(`"usageCoreNanoSeconds":{"value":"`):]
	if n := atoi(t, v[:strings.Index(v, `"`)]); n <= 0 {
		t.Fatalf("CPU usage %d", n)
	}
}

func nodeVMUpdate(t *testing.T) {
	nodeRun(t, "crictl update --cpu-quota 25000 --cpu-period 100000 "+nodeVM.ctr)
	checkVMLimits(t, "25000 100000")
}

// nodeVMHibernate hibernates the VM (managed save: qemu exits, systemd
// removes its scope) and brings it back: the new qemu gets the scope
// again, with the limits as last updated.
func nodeVMHibernate(t *testing.T) {
	timed(t, "VM hibernate", "crimuxctl --timeout 5m vm power "+nodeVM.ctr+" hibernate")
	nodeWait(t, 30*time.Second, "qemu and its scope gone", "! pgrep -x qemu-system-x86 && ! test -d "+nodeVM.scope)
	timed(t, "VM resume", "crimuxctl --timeout 5m vm power "+nodeVM.ctr+" running")
	pid := nodeWait(t, 30*time.Second, "qemu again", "pgrep -x qemu-system-x86")
	if pid == nodeVM.qemuPID {
		t.Fatalf("qemu kept pid %s across hibernation", pid)
	}
	nodeVM.qemuPID = pid
	checkQemuInScope(t)
	checkVMLimits(t, "25000 100000")
}
