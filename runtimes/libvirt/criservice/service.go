// Package criservice is the CRI face of the VM runtime: the
// RuntimeService calls kubelet makes on a VM pod (sandbox, container,
// status, stats, events, console logs and attach), served in-process over
// an in-memory gRPC connection, so the CRI server routes to it exactly as
// to containerd and its IDs get the "vm--" prefix on the way out. Each
// handler is a few named steps on the runtime's core (package core),
// through the parts of it the Service declares (core.go).
package criservice

import (
	"context"
	"log/slog"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	vmconsole "github.com/crimux/crimux/runtimes/libvirt/console"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/migrate"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmevents"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// Service serves the CRI RuntimeService for VM pods.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	serviceCore
	Opts    *core.Options
	Accel   string
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Images  core.ImageReader
	Cgroups core.Cgroups
	Net     vmnet.PodNetwork
	CIData  cidata.Writer
	Console *vmconsole.Consoles
	Events  *vmevents.Hub
	Locks   *opguard.Locks
	// Clones plans VMs as clones of their templates and restores them
	// (package instant); nil: no VM starts from a template.
	Clones Clones
	// Arrivals makes migration targets and starts them waiting (package
	// migrate); nil: no VM pod can be a migration target.
	Arrivals Arrivals
	// RootDisks make a VM's root disk at CreateContainer (package
	// rootdisk; core.go).
	RootDisks RootDisks
	// Resizer resizes VMs in place (package resize); nil: no VM is
	// resized.
	Resizer Resizer
	// Meter measures the VMs for their stats (package vmstats).
	Meter Meter
	// Networks are the VM pods' networks: planned, set up, torn down,
	// their readiness.
	Networks *vmnet.Networks

	// streaming serves Attach to the serial console; nil until Serve.
	streaming streaming.Server
	// containerItems and sandboxItems keep the VMs' list items encoded
	// (list_encoded.go).
	containerItems itemCache[containerKey]
	sandboxItems   itemCache[sandboxKey]
}

// Arrivals is what the CRI face asks of the node's half of live
// migration: a VM pod made with the annotation crimux.io/migrate-from is
// planned as a migration target, and its container, once started, waits
// for its VM to arrive.
type Arrivals interface {
	PlanIncoming(rec *store.Container, opts vm.Options, storage vm.Storage) error
	AwaitIncoming(c *store.Container) error
}

// arrivals is r.Arrivals, or, with none, one that refuses every target.
func (r *Service) arrivals() Arrivals {
	if r.Arrivals == nil {
		return noArrivals{}
	}
	return r.Arrivals
}

// noArrivals refuses every migration target: migration is off.
type noArrivals struct{}

func (noArrivals) PlanIncoming(*store.Container, vm.Options, vm.Storage) error {
	return migrate.ErrIncomingOff
}
func (noArrivals) AwaitIncoming(*store.Container) error { return migrate.ErrIncomingOff }

// New returns the CRI face of the runtime r.
func New(r *core.Runtime) *Service {
	return &Service{serviceCore: r, Opts: &r.Opts, Accel: r.Accel, Log: r.Log, Store: r.Store, Conn: r.Conn,
		Images: r.Images, Cgroups: r.Cgroups, Net: r.Networks.Net, Networks: r.Networks, CIData: r.CIData, Console: r.Console, Events: r.Events, Locks: &r.Locks}
}

// Serve starts the streaming server (Attach) on addr (host:port, port 0
// picks a free one) until ctx ends.
func (r *Service) Serve(ctx context.Context, addr string) error {
	return r.startStreaming(ctx, addr)
}
