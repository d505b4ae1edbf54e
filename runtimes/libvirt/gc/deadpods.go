package gc

import (
	"errors"
	"io/fs"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// markDeadSandboxes runs in the first pass after crimux starts: a VM pod
// still recorded ready whose network namespace is gone, and whose VM does
// not run, died with the node (a reboot or a power cut took its
// namespace, its tap, its cgroup and its qemu). It is reported NOTREADY,
// as containerd reports a sandbox whose task is gone, so that kubelet
// stops it and makes the pod again, instead of starting a new VM in a
// pod with no network. The stop's CNI DEL releases its address (here if
// kubelet's StopPodSandbox does not come first: finishSandboxes).
func (r *Collector) markDeadSandboxes() {
	recs, err := r.Store.Sandboxes()
	if err != nil {
		return
	}
	for _, sb := range recs {
		if namespaceGone(sb) {
			r.markDead(sb.ID)
		}
	}
}

// namespaceGone: sb is ready in its record but its namespace's path is
// not there (not a mere error reading it).
func namespaceGone(sb *store.Sandbox) bool {
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY || sb.Creating || sb.Removing || sb.Net == nil || sb.Net.NetNS == "" {
		return false
	}
	_, err := os.Lstat(sb.Net.NetNS)
	return errors.Is(err, fs.ErrNotExist)
}

// markDead decides again under the pod's lock: its VM must not run (a
// VM running in a pod whose namespace path was removed by hand keeps
// its network: the namespace lives as long as its tap's holder).
func (r *Collector) markDead(id string) {
	defer r.Locks.Lock(id)()
	sb, err := r.Store.Sandbox(id)
	if err != nil || !namespaceGone(sb) {
		return
	}
	if ctrs, err := r.Store.ContainersOf(id); err != nil || anyRunning(ctrs) {
		return
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if err := r.Store.PutSandbox(sb); err != nil {
		r.Log.Error("record a dead VM pod not ready", "sandbox", id, "err", err)
		return
	}
	r.Log.Warn("VM pod not ready: its network namespace is gone (the node restarted?); kubelet makes the pod again",
		"sandbox", id, "pod", sb.Config.GetMetadata().GetNamespace()+"/"+sb.Config.GetMetadata().GetName(), "netns", sb.Net.NetNS)
}

func anyRunning(ctrs []*store.Container) bool {
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return true
		}
	}
	return false
}
