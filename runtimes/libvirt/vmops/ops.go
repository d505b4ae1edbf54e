// Package vmops is the VM runtime's VM API operations: what a VM can do
// that a container cannot — power states, reboots, snapshots. The vmapi
// package serves them over gRPC (as vmtypes.Operator); here they are
// plain methods, addressed by the runtime's own pod or container IDs
// (without the "vm--" prefix).
// Each runs under the pod's lock (core.BeginVMOp), like every CRI call on
// the same VM.
//
// The power state is the user's choice, kept in the container record;
// the CRI container stays CONTAINER_RUNNING, with the same ID, in every
// one (see vmtypes.PowerState). A stop the user asked for is no exit:
// the power state is recorded before libvirt acts, so the lifecycle event
// of that stop and the resync after a reconnect leave the container
// running (core). A guest that powers itself off while its power state is
// Running still ends the container. After every operation, done or
// failed, the power state is settled from what libvirt reports, so a
// half-done operation leaves a VM the API can act on again.
package vmops

import (
	"log/slog"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/rebootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// Ops are the VM operations of a runtime: the parts of its core they use,
// and nothing else of it.
type Ops struct {
	vmCore
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Reboots *rebootwatch.Watch
	Boots   *bootwatch.Watcher
}

// vmCore is what the operations ask of the runtime's core: a VM under its
// pod's lock and its domain, a qemu start the placer expects, the boot
// watch of a started guest, the full-disk check, the caps.
type vmCore interface {
	BeginVMOp(id string) (*core.VMOp, error)
	LockVM(id string) (*store.Container, func(), error)
	SandboxOf(id string) (string, error)
	DomainOf(c *store.Container) (virt.Libvirt, virt.Domain, error)
	StartingQemu(c *store.Container, start func() error) error
	WatchBoot(c *store.Container, since time.Time, fresh bool)
	RequireRoom(what string) error
	MaxSnapshots() int
}

// New returns the VM operations of the runtime r.
func New(r *core.Runtime) *Ops {
	return &Ops{vmCore: r, Log: r.Log, Store: r.Store, Conn: r.Conn, Reboots: r.Reboots, Boots: r.Boots}
}
