package rootdisk

import (
	"log/slog"

	vmconsole "github.com/crimux/crimux/runtimes/libvirt/console"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/snapcarry"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Core is what the root disks' room uses of the VM runtime's core: its
// options, store, libvirt and the VMs' logs, and the cap of a VM's
// snapshots.
type Core struct {
	snapshotCap
	Opts    *core.Options
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Console *vmconsole.Consoles
}

// snapshotCap: the cap of a VM's snapshots.
type snapshotCap interface {
	MaxSnapshots() int
}

// CoreOf is the part of the runtime r the room uses.
func CoreOf(r *core.Runtime) Core {
	return Core{snapshotCap: r, Opts: &r.Opts, Log: r.Log, Store: r.Store, Conn: r.Conn, Console: r.Console}
}

// Room is the root disks of the node's VMs: the parts of the core it
// uses, and the root volumes CreateContainers are claiming.
type Room struct {
	Core
	// claims are the root volumes being prepared (volume.go).
	claims volumeClaims
}

// New returns the root disks' room on c.
func New(c Core) *Room { return &Room{Core: c} }

// carrier carries the snapshots of a pod's root disk from its previous VM
// to its next (package snapcarry).
func (r *Room) carrier() snapcarry.Carrier {
	return snapcarry.Carrier{StateDir: r.Opts.StateDir, Store: r.Store}
}
