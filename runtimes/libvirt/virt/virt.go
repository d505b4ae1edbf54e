// Package virt is crimux's one interface to libvirt: the domain
// operations the VM runtime needs (define, start, stop, save, snapshots,
// state, metadata, events), in types of crimux's own, with libvirt's
// errors classified once (errdefs). It has two implementations: the
// connection to libvirtd over go-libvirt (Conn, remote.go), the only code
// of crimux that imports go-libvirt, and an in-memory fake for unit tests
// (virtfake).
package virt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// Libvirt is a live connection to libvirtd.
type Libvirt interface {
	Domains
	Power
	SavedStates
	Snapshots
	Events
	Agent
	Resize
	Stats
	Migrations
	// Version is libvirtd's version; an answer proves it is up.
	Version() (uint64, error)
}

// Domains define, find, describe and remove domains.
type Domains interface {
	Lookup(name string) (Domain, error)
	// ListAll lists every domain, defined or transient, running or not.
	ListAll() ([]Domain, error)
	Define(xml string) (Domain, error)
	// Undefine removes a domain's definition with its managed save image,
	// its snapshots' metadata and its NVRAM.
	Undefine(Domain) error
	State(Domain) (State, error)
	HasManagedSave(Domain) (bool, error)
	XML(Domain) (string, error)
	// SetMetadata replaces the metadata element of namespace ns (written
	// with prefix) in the domain's persistent definition and, while it
	// runs, its live one. xml declares no namespace of its own.
	SetMetadata(d Domain, xml, prefix, ns string) error
}

// Power starts, stops, pauses, saves and reboots domains.
type Power interface {
	Start(Domain) error
	// StartIfOff starts the named domain unless it runs already; started
	// is false when it did. The lookup, the state and the start go on one
	// connection of its own, as a start's call does (remote.long): in a
	// burst of starts, the shared connection's few slots are taken, and
	// the lookups would wait behind each other before every start. A
	// state that cannot be read counts as off: the start then tells.
	StartIfOff(name string) (started bool, err error)
	StartPaused(Domain) error
	// Shutdown presses the ACPI power button; the guest decides.
	Shutdown(Domain) error
	Destroy(Domain) error
	Suspend(Domain) error
	Resume(Domain) error
	// Reboot asks the guest to reboot: through its guest agent when one
	// is connected (the guest then reboots on its own, whatever becomes of
	// the caller), else by the ACPI power button and qemu's fake reboot.
	// Reset resets the VM at once.
	Reboot(Domain) error
	Reset(Domain) error
	// ManagedSave saves the memory to disk and stops the domain; its next
	// start restores it, running.
	ManagedSave(Domain) error
}

// SavedStates save a running domain's state to a file and start domains
// from such files: the VM templates and their clones.
type SavedStates interface {
	// SaveState saves the running domain's memory and device state into
	// path, a file libvirtd creates as root (mode 0600), and stops the
	// domain.
	SaveState(d Domain, path string) error
	// RestoreState starts, running, the domain described by the save
	// image at path, with the XML the image holds (none is passed: with
	// one libvirt would check it against the image's). libvirtd opens
	// path as root, reads it once from start to end and hands qemu the
	// open file: path may be a FIFO.
	RestoreState(path string) error
	// SetTime sets the guest's clock to t through its agent.
	SetTime(d Domain, t time.Time) error
}

// Snapshots are libvirt's internal snapshots of a domain.
type Snapshots interface {
	// CreateSnapshot creates a snapshot from its XML, atomically.
	CreateSnapshot(d Domain, xml string) (Snapshot, error)
	// LookupSnapshot is ErrNoSnapshot when the domain has none by name.
	LookupSnapshot(d Domain, name string) (Snapshot, error)
	ListSnapshots(Domain) ([]Snapshot, error)
	SnapshotXML(Snapshot) (string, error)
	IsCurrentSnapshot(Snapshot) (bool, error)
	RevertToSnapshot(Snapshot) error
	DeleteSnapshot(Snapshot) error
	// RedefineSnapshot records the metadata of a snapshot that already
	// exists in the domain's disk (its XML as SnapshotXML gave it, with
	// the domain's own definition inside); current makes it the domain's
	// current snapshot.
	RedefineSnapshot(d Domain, xml string, current bool) (Snapshot, error)
}

// Events follow what happens to domains for as long as ctx and the
// connection live. Each connection is subscribed once, never
// unsubscribed while it lives (see Conn).
type Events interface {
	LifecycleEvents(ctx context.Context) (<-chan LifecycleEvent, error)
	// RebootEvents carries the name of each domain whose guest rebooted.
	RebootEvents(ctx context.Context) (<-chan string, error)
	// Disconnected is closed when the connection is gone.
	Disconnected() <-chan struct{}
}

// Resize changes the size of a domain (in-place resize). live applies
// the change to the running VM too (hot plug); the persistent definition
// always follows, so the next boot has the new size.
type Resize interface {
	// SetVCPUs sets how many of the domain's vCPUs are plugged.
	SetVCPUs(d Domain, n uint, live bool) error
	// RequestMemory sets the requested size of the domain's virtio-mem
	// device: what the guest is asked to plug.
	RequestMemory(d Domain, requestedMiB uint64, live bool) error
	// PluggedMemory reads the domain's virtio-mem device as it runs:
	// what is asked of the guest and what it has plugged. ok is false
	// for a domain without one.
	PluggedMemory(d Domain) (p MemoryPlug, ok bool, err error)
}

// Stats read what a running domain's guest says of itself.
type Stats interface {
	// GuestMemory is the guest's account of its RAM as its virtio-balloon
	// driver last reported it. ok is false when there is none to read:
	// no driver (or no balloon) in the guest, a guest that has not
	// reported yet, or a domain busy with a job (libvirt is not waited
	// for). The guest writes these figures: they tell, they prove nothing.
	GuestMemory(d Domain) (m GuestMemory, ok bool, err error)
	// IO is what the running domain read and wrote on all its disks and
	// received and sent on all its NICs, since its qemu started.
	IO(d Domain) (IO, error)
}

// GuestMemory is a guest's own account of its RAM, in bytes: TotalBytes
// its MemTotal (hot-plugged memory included), UsableBytes what it could
// give back without swapping (MemAvailable), UnusedBytes what it leaves
// untouched (MemFree).
type GuestMemory struct {
	TotalBytes, UsableBytes, UnusedBytes uint64
}

// InUseBytes is what the guest could not give back without swapping.
// IO counts a domain's disk and network traffic, in bytes.
type IO struct {
	BlockReadBytes, BlockWriteBytes uint64
	NetReceiveBytes, NetSendBytes   uint64
}

func (m GuestMemory) InUseBytes() uint64 { return m.TotalBytes - min(m.UsableBytes, m.TotalBytes) }

// MemoryPlug is a virtio-mem device's state, in MiB.
type MemoryPlug struct {
	SizeMiB, RequestedMiB, CurrentMiB uint64
}

// Agent talks to a domain's QEMU guest agent.
type Agent interface {
	// AgentCommand sends one command (JSON) to the guest agent and
	// returns its answer, waiting at most timeout. No agent configured or
	// connected is FailedPrecondition; one that does not answer,
	// Unavailable; a call past the caps of calls in flight (AgentCaps, on
	// a Conn's connections), ResourceExhausted.
	AgentCommand(d Domain, cmd string, timeout time.Duration) (string, error)
}

// UUID is a domain's UUID.
type UUID [16]byte

// Domain is a handle on a domain, as libvirt identifies it.
type Domain struct {
	Name string
	UUID UUID
	// ID is the running domain's number; -1 while it is shut off (as
	// libvirt numbers them in a list of domains).
	ID int32
}

// Inactive: libvirt listed the domain shut off (no qemu runs for it).
func (d Domain) Inactive() bool { return d.ID == -1 }

// Snapshot is a handle on a snapshot of a domain.
type Snapshot struct {
	Name   string
	Domain Domain
}

// State is a domain's state, libvirt's numbering.
type State int32

// The domain states.
const (
	StateNoState State = iota
	StateRunning
	StateBlocked
	StatePaused
	StateShutdown // shutting down
	StateShutoff
	StateCrashed
	StatePMSuspended
)

// String is the state's name as crimux reports it.
func (s State) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateBlocked:
		return "blocked"
	case StatePaused:
		return "paused"
	case StateShutdown:
		return "shutting-down"
	case StateShutoff:
		return "shutoff"
	case StateCrashed:
		return "crashed"
	case StatePMSuspended:
		return "pmsuspended"
	}
	return "nostate"
}

// Active reports whether qemu runs the domain (running or paused).
func (s State) Active() bool {
	return s != StateShutoff && s != StateNoState && s != StateCrashed
}

// LifecycleEvent is a domain's change of life-cycle state.
type LifecycleEvent struct {
	Domain string
	// Stopped: qemu is gone; Why says how.
	Stopped bool
	Why     StopReason
	// PausedIOError: qemu paused the guest on a disk error (by its
	// default, werror=enospc: a full filesystem under a disk).
	PausedIOError bool
}

// StopReason is why a domain stopped.
type StopReason int

// The reasons a domain stops.
const (
	StopOther     StopReason = iota
	StopShutdown             // the guest powered off
	StopDestroyed            // destroyed (killed)
	StopCrashed              // qemu or the guest crashed
	StopFailed               // qemu failed
	StopSaved                // managed save, or a snapshot revert
	StopMigrated             // moved to another node, live
)

// ErrNoSnapshot: the domain has no snapshot of that name. It is a
// NotFound.
var ErrNoSnapshot = errors.New("no such snapshot")

// IsNoSnapshot reports whether err is ErrNoSnapshot.
func IsNoSnapshot(err error) bool { return errors.Is(err, ErrNoSnapshot) }

// noSnapshot wraps err as ErrNoSnapshot, a NotFound.
func noSnapshot(err error) error {
	return fmt.Errorf("%w: %w: %w", err, ErrNoSnapshot, errdefs.ErrNotFound)
}
