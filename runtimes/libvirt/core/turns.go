package core

import (
	"runtime"
	"time"

	"github.com/crimux/crimux/internal/turns"
)

// Turns take the steps that prepare a new VM pod a few at a time, in the
// order the calls came (internal/turns): the pod network's setup
// (RunPodSandbox: a namespace, the CNI plugins) and the VM's files and
// domain (CreateContainer: cloud-init volume, overlay, define). A burst
// of pods then gets its first VMs started while the rest are still being
// prepared, instead of every pod waiting for the last one's CNI plugins
// and qemu-img, as when they all share the CPU at once. KubeVirt's
// virt-handler likewise works through its VMs with a few workers.
type Turns struct {
	Network, Define *turns.Gate
}

// turnWidth is how many pods take a step at once: twice the cores keeps
// them busy while a step waits on a disk or on libvirtd.
func turnWidth() int { return max(4, 2*runtime.NumCPU()) }

// turnMaxWait bounds a call's wait for its turn: a step that hangs (a
// CNI plugin that never answers) delays the others by this much at most.
const turnMaxWait = 2 * time.Second

// NewTurns are the turns of a runtime.
func NewTurns() Turns {
	return Turns{Network: turns.New(turnWidth(), turnMaxWait), Define: turns.New(turnWidth(), turnMaxWait)}
}
