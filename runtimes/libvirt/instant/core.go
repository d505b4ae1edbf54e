package instant

import (
	"log/slog"

	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// Core is what a Maker uses of the VM runtime's core: its options, store,
// libvirt, cgroups, cloud-init writer, pod network and counters, and the
// placement of a template's qemu.
type Core struct {
	templateVMs
	Opts     *core.Options
	Log      *slog.Logger
	Store    *store.Store
	Conn     core.Connection
	Cgroups  core.Cgroups
	CIData   cidata.Writer
	Net      vmnet.PodNetwork
	Counters vmcounters.Counters
}

// templateVMs registers a template's VM while it is made, so that the
// placement server knows its qemu.
type templateVMs interface {
	MakingTemplate(domain string, t core.TemplateVM) (id *store.VMIdentity, done func(), err error)
	StartingTemplate(domain string, start func() error) error
}

// CoreOf is the part of the runtime r a Maker uses.
func CoreOf(r *core.Runtime) Core {
	return Core{templateVMs: r, Opts: &r.Opts, Log: r.Log, Store: r.Store, Conn: r.Conn, Cgroups: r.Cgroups,
		CIData: r.CIData, Net: r.Networks.Net, Counters: r.Counters}
}
