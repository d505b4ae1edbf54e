package core

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/crimux/crimux/internal/errdefs"
)

// StateDirReserve is the room new VM pods leave on the state dir's
// filesystem: the store's writes, the running VMs' overlays growing, their
// snapshots. Below it a new VM pod is refused (RequireRoom) instead of
// failing half way, or filling the disk the running VMs write to.
const StateDirReserve = 128 << 20

// RequireRoom refuses a new VM pod (what: "RunPodSandbox") while the
// state dir's filesystem has less than StateDirReserve free:
// ResourceExhausted naming the directory and what is free.
func (r *Runtime) RequireRoom(what string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(r.Opts.StateDir, &st); err != nil {
		return nil // unknown: the calls themselves will say
	}
	free := int64(st.Bavail) * st.Bsize
	if free >= StateDirReserve {
		return nil
	}
	return fmt.Errorf("%s: the filesystem of crimux's state dir %s has %s free, less than the %s kept for the store and the running VMs' disks: "+
		"free space on it (or move the state dir): %w", what, r.Opts.StateDir, ShortBytes(free), ShortBytes(StateDirReserve), errdefs.ErrResourceExhausted)
}
