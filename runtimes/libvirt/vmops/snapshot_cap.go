package vmops

import (
	"fmt"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A snapshot lives inside the pod's disk: the disk's clusters as they
// were (kept while the guest overwrites them) and, of a running or paused
// VM, its whole RAM. Each CreateSnapshot and each new
// crimux.io/snapshot-request adds one, so a VM has at most
// max_snapshots_per_vm. Their space is the disk file's: the container's
// writable layer (ContainerStats) and ImageFsInfo count the file's
// allocated blocks, internal snapshots included, so kubelet's eviction
// sees them.

// DefaultMaxSnapshotsPerVM caps a VM's snapshots when
// Options.MaxSnapshotsPerVM is 0 (config's default too): core's, which
// also caps the snapshots a root volume brings.
const DefaultMaxSnapshotsPerVM = core.DefaultMaxSnapshotsPerVM

// snapshotRoom refuses a new snapshot of dom once it has the cap's
// number (those libvirt knows of: the ones the VM API can delete).
func (r *Ops) snapshotRoom(l virt.Libvirt, dom virt.Domain) error {
	limit := r.MaxSnapshots()
	snaps, err := l.ListSnapshots(dom)
	if err != nil {
		return fmt.Errorf("snapshots of domain %s: %w", dom.Name, err)
	}
	if len(snaps) >= limit {
		return fmt.Errorf("the VM has %d snapshots, its cap (libvirt.max_snapshots_per_vm = %d): delete one first: %w",
			len(snaps), limit, errdefs.ErrResourceExhausted)
	}
	return nil
}
