package resize

import (
	"log/slog"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// Core is what a Resizer uses of the VM runtime's core: its log, store,
// libvirt and cgroups, a VM's lock and the cgroup its size gives it.
type Core struct {
	vms
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Cgroups core.Cgroups
}

// vms: a VM's record locked, and the cgroup a record's size gives it.
type vms interface {
	LockContainer(id string) (*store.Container, func(), error)
	CgroupOf(c *store.Container) core.VMCgroup
}

// CoreOf is the part of the runtime r a Resizer uses.
func CoreOf(r *core.Runtime) Core {
	return Core{vms: r, Log: r.Log, Store: r.Store, Conn: r.Conn, Cgroups: r.Cgroups}
}
