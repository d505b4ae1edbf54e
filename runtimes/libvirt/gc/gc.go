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

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// Collector is the collector of a runtime.
type Collector struct {
	*core.Runtime
	// Templates are the VM templates, collected with their images (nil:
	// templates are off).
	Templates *template.Store

	// period is Options.GCInterval, or what a reload made it.
	period period
}

// New returns the collector of the runtime r.
func New(r *core.Runtime) *Collector { return &Collector{Runtime: r} }

// Run runs a collector pass every Options.GCInterval (a minute by
// default; SetInterval changes it) until ctx ends.
func (r *Collector) Run(ctx context.Context) { r.runCollector(ctx) }
