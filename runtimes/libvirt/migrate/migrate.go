// Package migrate is the node's half of a live migration: describe a
// running VM for its target (MigrationSource), prepare a waiting target
// pod for it (PrepareMigration), send it (Migrate), receive it and
// record it arrived or failed (FinishMigration), the seals each node
// puts on what it hands the other, and the store transitions of both
// ends, picked up again after a restart (ResumeMigrations). The streams
// themselves are package migration's; the CRI face (criservice) makes a
// target pod and starts its container through this room (PlanIncoming,
// AwaitIncoming).
package migrate

import (
	"log/slog"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	vmconsole "github.com/crimux/crimux/runtimes/libvirt/console"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmevents"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
)

// Room is the node's half of live migrations: the parts of the
// runtime's core it uses, and nothing else of it.
type Room struct {
	migrateCore
	Opts    *core.Options
	Log     *slog.Logger
	Store   *store.Store
	Conn    core.Connection
	Cgroups core.Cgroups
	Net     vmnet.PodNetwork
	Console *vmconsole.Consoles
	Events  *vmevents.Hub
	// RootVolumes checks a durable VM's root volume and gives it back to
	// its VM (package rootdisk).
	RootVolumes RootVolumes
	// ReaddressWait bounds an arrived guest's network change, its
	// agent's wait included; 0 is defaultReaddressWait (tests shorten it).
	ReaddressWait time.Duration
}

// RootVolumes is what a migration asks of the room of the VMs' root
// disks: a target's root volume checked before its VM arrives, a source's
// given back to its VM's identity after a failed migration.
type RootVolumes interface {
	CheckRootVolume(c *store.Container) error
	TakeBackRootVolume(c *store.Container) error
}

// migrateCore is what a migration asks of the runtime's core: this
// node's migration endpoint (nil: migration is off), a migrating VM's
// store transitions, and a VM's lock, cgroup, identity and notices.
type migrateCore interface {
	MigrationNode() *migration.Node
	ArmIncoming(c *store.Container) (disarm func(), err error)
	FailTarget(c *store.Container, why string) error
	TargetTook(c *store.Container, result string)
	MigratedAway(id, msg string)
	ShutoffMigrated(l virt.Libvirt, d virt.Domain) bool
	LockContainer(id string) (*store.Container, func(), error)
	LockVM(id string) (*store.Container, func(), error)
	CgroupOf(c *store.Container) core.VMCgroup
	IdentityForDomain(domain string) (*store.VMIdentity, bool)
	Event(c *store.Container, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse
	StartNotice(id, reason, msg string)
	Note(id, msg string)
}

// New returns the migration room of the runtime r. Its endpoint is read
// through r.MigrationNode at each call: it is started after the rooms
// are made.
func New(r *core.Runtime) *Room {
	return &Room{migrateCore: r, Opts: &r.Opts, Log: r.Log, Store: r.Store, Conn: r.Conn, Cgroups: r.Cgroups,
		Net: r.Networks.Net, Console: r.Console, Events: r.Events}
}
