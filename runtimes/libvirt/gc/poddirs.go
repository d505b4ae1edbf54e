package gc

import (
	"os"
	"path/filepath"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
)

// collectPodDirs removes the directories of VM pods that have no record
// (a crash between a pod's record going and its directory): their root
// disks. A pod's directory goes with its record otherwise
// (core.FinishSandboxRemoval).
func (r *Collector) collectPodDirs(rep *GCReport) {
	entries, err := os.ReadDir(filepath.Join(r.Opts.StateDir, vmfiles.PodsDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := r.Store.Sandbox(e.Name()); !errdefs.IsNotFound(err) {
			continue
		}
		if os.RemoveAll(filepath.Join(r.Opts.StateDir, vmfiles.PodsDir, e.Name())) == nil {
			rep.Dirs++
		}
	}
}
