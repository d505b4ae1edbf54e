package rootdisk

import (
	"log/slog"

	vmconsole "github.com/crimux/crimux/runtimes/libvirt/console"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Core is what the root disks' room uses of the VM runtime's core: its
// options, store, libvirt and the VMs' logs, the cap of a VM's snapshots,
// and the snapshots a pod's VMs carry in its root disk.
type Core struct {
	diskCore
	Opts    *core.Options
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Console *vmconsole.Consoles
}

// diskCore: the snapshot cap, a pod's directory, and the snapshots of a
// pod's root disk saved from its previous VM and carried to its next.
type diskCore interface {
	MaxSnapshots() int
	PodDir(sbID string) string
	NewestVMOf(sbID, except string) (*store.Container, error)
	ForgetSnapshots(sbID string) error
	SaveSnapshots(l virt.Libvirt, c *store.Container) error
	CarrySnapshots(l virt.Libvirt, dom virt.Domain, sbID string) (int, error)
}

// CoreOf is the part of the runtime r the room uses.
func CoreOf(r *core.Runtime) Core {
	return Core{diskCore: r, Opts: &r.Opts, Log: r.Log, Store: r.Store, Conn: r.Conn, Console: r.Console}
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
