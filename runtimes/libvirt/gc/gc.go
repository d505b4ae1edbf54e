// Package gc is the VM runtime's collector: it converges what exists on
// what the store says should. It finishes teardowns that failed or were
// cut short (records Removing, or Creating since before the last start;
// pod networks too), adopts running domains that carry crimux's identity
// but have no record (a wiped state dir), deletes stopped ones and VM
// directories nobody owns, prunes the image cache of entries no VM needs
// (images.go), tells the pod network's CNI plugins which attachments
// live (CNI GC, network.go), and reports — never touches — resources of
// another crimux identity (foreign.go), which an operator adopts or
// deletes one at a time through the VM API (crimuxctl gc). It runs when
// libvirtd (re)connects and every Options.GCInterval (a minute by default).
package gc

import (
	"context"
	"log/slog"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// Collector is the collector of a runtime.
type Collector struct {
	collectorCore
	Opts     *core.Options
	Accel    string
	Log      *slog.Logger
	Store    *store.Store
	Conn     core.Connection
	Net      vmnet.PodNetwork
	Cgroups  core.Cgroups
	Images   core.ImageReader
	Locks    *opguard.Locks
	Counters vmcounters.Counters
	// Templates are the VM templates, collected with their images (nil:
	// templates are off).
	Templates *template.Store
	// Networks are the pod networks: their teardown, the attachments
	// CNI GC keeps.
	Networks *vmnet.Networks
	// Making tells whether a template's domain is being made now (nil:
	// none is, templates are off).
	Making interface{ IsMakingTemplate(domain string) bool }

	// period is Options.GCInterval, or what a reload made it.
	period period
}

// New returns the collector of the runtime r.
func New(r *core.Runtime) *Collector {
	return &Collector{collectorCore: r, Opts: &r.Opts, Accel: r.Accel, Log: r.Log, Store: r.Store, Conn: r.Conn,
		Net: r.Networks.Net, Networks: r.Networks, Cgroups: r.Cgroups, Images: r.Images, Locks: &r.Locks, Counters: r.Counters}
}

// collectorCore is what the collector asks of the runtime's core: the
// teardowns it finishes and where a VM's files are.
type collectorCore interface {
	Teardown(c *store.Container) error
	FinishSandboxRemoval(ctx context.Context, sb *store.Sandbox) error
	VMDir(id string) string
}

// Run runs a collector pass every Options.GCInterval (a minute by
// default; SetInterval changes it) until ctx ends.
func (r *Collector) Run(ctx context.Context) { r.runCollector(ctx) }
