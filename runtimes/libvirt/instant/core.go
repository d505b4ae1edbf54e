package instant

import (
	"log/slog"

	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// Core is what a Maker and a Room use of the VM runtime's core: its
// options, accelerator, store, libvirt, images, cgroups, cloud-init
// writer, pod network and counters, the identities a template's VM takes
// one of, the starts its qemu's placement is granted by, and a clone's
// start.
type Core struct {
	cloneStarts
	Opts     *core.Options
	Accel    string
	Log      *slog.Logger
	Store    *store.Store
	Conn     core.Connection
	Images   core.ImageReader
	Cgroups  core.Cgroups
	CIData   cidata.Writer
	Net      vmnet.PodNetwork
	Counters vmcounters.Counters
	IDs      *vmidentity.Allocator
	Starts   *core.Starts
}

// cloneStarts starts a clone's qemu as any pod's, and says how it started
// in its pod's events.
type cloneStarts interface {
	StartingQemu(c *store.Container, start func() error) error
	StartNotice(id, reason, msg string)
}

// CoreOf is the part of the runtime r a Maker and a Room use.
func CoreOf(r *core.Runtime) Core {
	return Core{cloneStarts: r, Opts: &r.Opts, Accel: r.Accel, Log: r.Log, Store: r.Store, Conn: r.Conn, Images: r.Images,
		Cgroups: r.Cgroups, CIData: r.CIData, Net: r.Networks.Net, Counters: r.Counters, IDs: r.IDs, Starts: r.Starts}
}
