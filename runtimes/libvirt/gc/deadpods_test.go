package gc

import (
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// TestDeadSandboxesAfterNodeRestart: after a node restart (the first pass
// after start), a ready VM pod whose namespace path is gone and whose VM
// does not run is reported NOTREADY and its network torn down (its
// address released); a pod whose namespace is there, one whose VM runs,
// and every pod in a periodic pass are left as they are.
func TestDeadSandboxesAfterNodeRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, f := e.gc, e.Net
	gone := filepath.Join(t.TempDir(), "gone")
	there := filepath.Join(t.TempDir(), "there")
	if err := os.WriteFile(there, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	netns := func(path string) func(*store.Sandbox) {
		return func(sb *store.Sandbox) { sb.Net.NetNS = path }
	}
	e.PutPod(t, "dead", netns(gone))
	e.PutVM(t, "dead", "dead-vm", runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerRunning)
	e.PutPod(t, "alive", netns(there))
	e.PutPod(t, "running", netns(gone))
	e.PutVM(t, "running", "running-vm", runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerRunning)

	var rep GCReport
	r.collectNetworks(&rep, false, true)
	if got := e.sandboxState(t, "dead"); got != runtimeapi.PodSandboxState_SANDBOX_READY || len(f.Teardowns) != 0 {
		t.Fatalf("a periodic pass: dead pod %v, teardowns %v; want it left to the first pass after start", got, f.Teardowns)
	}
	r.collectNetworks(&rep, true, true)
	if got := e.sandboxState(t, "dead"); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("the pod whose namespace is gone is %v, want NOTREADY", got)
	}
	if len(f.Teardowns) != 1 || f.Teardowns[0] != "dead" {
		t.Fatalf("teardowns %v, want the dead pod's network only", f.Teardowns)
	}
	for _, id := range []string{"alive", "running"} {
		if got := e.sandboxState(t, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("pod %s is %v, want READY", id, got)
		}
	}
}

func (e *env) sandboxState(t *testing.T, id string) runtimeapi.PodSandboxState {
	t.Helper()
	sb, err := e.R.Store.Sandbox(id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.State
}
