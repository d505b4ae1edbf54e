package core_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/vmtypes"
)

// TestSetOOMScore: a VM's placed process gets the OOM score adjustment
// kubelet gave its container: a BestEffort pod's 1000, and a Guaranteed
// pod's -997 where crimux may lower a score (CAP_SYS_RESOURCE; where it
// may not, the VM starts with qemu's own).
func TestSetOOMScore(t *testing.T) {
	for _, adj := range []int64{1000, -997} {
		setOOMScore(t, adj)
	}
}

func setOOMScore(t *testing.T, adj int64) {
	e := coretest.New(t)
	e.PutPod(t, "p1", nil)
	c := e.PutVM(t, "p1", "c1", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)
	c.Config.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{OomScoreAdj: adj}}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if err := e.R.SetOOMScore(c.Domain, child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(child.Process.Pid) + "/oom_score_adj")
	got := strings.TrimSpace(string(b))
	if adj < 0 && got == "0" && !canLowerOOMScore() {
		t.Logf("oom_score_adj %d not set: no CAP_SYS_RESOURCE here", adj)
	} else if err != nil || got != strconv.FormatInt(adj, 10) {
		t.Fatalf("oom_score_adj %q, %v; want %d", b, err, adj)
	}
	if err := e.R.SetOOMScore("not-a-vm", child.Process.Pid); err == nil {
		t.Fatal("a domain of no VM of crimux got a score")
	}
}

// canLowerOOMScore: this process has CAP_SYS_RESOURCE (bit 24).
func canLowerOOMScore() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<24) != 0
		}
	}
	return false
}
