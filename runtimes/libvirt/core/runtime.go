// Package core is the VM runtime's core: its parts (store, connection to
// libvirt, cgroups, pod network, console copiers, events), the per-pod
// locks, and the life cycle every other room of the runtime shares —
// start, stop, exit, teardown of a VM, the state observed from libvirt,
// the power state the user chose, the intent records and their rollback.
// The rooms on top: the feature rooms (vmops, gc, instant, migrate,
// rootdisk, resize, vmstats) and over them criservice (the CRI face).
// None of them talks to libvirt but through virt.Libvirt, so all of them
// are unit-tested against virtfake.
//
// What a VM is made of, per container, under <state>/vms/<id>/: see
// package vmfiles.
//
// Life cycle of a container record (the state machine):
//
//	CREATED --StartContainer--> RUNNING --guest power-off / StopContainer / crash--> EXITED
//	any --RemoveContainer--> (gone: domain undefined, overlay, cgroup and dir removed)
//
// A power state the user chose (vmtypes.PowerState) keeps the container
// RUNNING: a stop the user asked for is no exit (see stopIsNoExit).
package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/console"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/nospace"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/rebootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmevents"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
)

// Options configure the VM runtime.
type Options struct {
	// StateDir holds the store and the VMs' files.
	StateDir string
	// URI is libvirtd's, e.g. qemu:///system.
	URI string
	// Accel is auto, kvm or tcg.
	Accel string
	// Emulator is the qemu wrapper that places qemu into the pod's cgroup
	// before it runs (see runtimes/libvirt/placer).
	Emulator string
	// Instance is crimux's identity, stamped on every domain.
	Instance string
	// MaxDiskVirtualSize caps the size of the disk a VM image may declare
	// (a qcow2's virtual size: its overlay grows up to it, on the state
	// dir's filesystem); 0 is DefaultMaxDiskVirtualSize.
	MaxDiskVirtualSize int64
	// MemoryOverheadMiB is added to the VM's RAM for its cgroup limit:
	// qemu's own memory (TCG translation cache, device emulation).
	MemoryOverheadMiB int64
	// MaxVCPUs and MaxMemoryMiB bound an in-place resize (config.Libvirt):
	// 0 is the node's cores, and twice a VM's boot RAM.
	MaxVCPUs     int
	MaxMemoryMiB int64
	// AgentCalls bound the guest-agent calls in flight, per VM and on the
	// node (counted by virt.Conn); a 0 field is its default.
	AgentCalls virt.AgentCaps
	// MaxSnapshotsPerVM caps a VM's snapshots; 0 is vmops'
	// DefaultMaxSnapshotsPerVM.
	MaxSnapshotsPerVM int
	// StreamingAddr is where the Attach streaming server listens
	// (host:port, port 0 picks a free one).
	StreamingAddr string
	// PlacementSocket is where the qemu wrapper asks to be placed into
	// its VM's cgroup; "" runs no placement server (tests).
	PlacementSocket string
	// Network gives VM pods a pod network through CNI (podnet); nil runs
	// them without one. Its Instance is set from Instance.
	Network *podnet.Config
	// Counters receives what the runtime counts (metrics); nil counts
	// nothing.
	Counters vmcounters.Counters
	// PeerSandboxes lists the pods other runtimes of the node put on the
	// same network (containerd's), so that CNI GC keeps their addresses;
	// nil: there are none.
	PeerSandboxes func(ctx context.Context) ([]string, error)
	// Identities are the uids and gids VM pods' qemu run as, one each
	// (vmidentity); Count 0: all run as qemu.conf's user.
	Identities vmidentity.Range
	// GuestBootTimeout is how long a cold-booted guest may show no sign
	// of an operating system before it is reported stuck
	// (bootwatch.Guests); 0 watches nothing. OnGuestBoot hears of it
	// (nil: nobody).
	GuestBootTimeout time.Duration
	OnGuestBoot      func(bootwatch.GuestBoot)
	// GCInterval is the collector's period; 0 is a minute.
	GCInterval time.Duration
	// TemplatesOff: every VM boots, none starts from a template.
	// TemplateParent is the cgroup templates are made under ("": the
	// default, /crimux-templates).
	TemplatesOff   bool
	TemplateParent string
	// TemplateLimits bound the templates (instant.Maker's fields of the
	// same names).
	TemplateLimits TemplateLimits
	// Migration is the node's live migration endpoint; nil:
	// VMs neither leave nor arrive.
	Migration *migration.Config
}

// TemplateLimits are the operator's bounds on templates: whether one
// serves every namespace, how many are made at once and kept, how long a
// failed one stays failed, its VM's CPU quota (thousandths of a CPU).
type TemplateLimits struct {
	ShareAcrossNamespaces bool
	MaxMaking, MaxKept    int
	RetryAfter            time.Duration
	CPUMillis             int64
}

// ImageReader gets a VM image's files out of the image store.
type ImageReader interface {
	Prepare(ctx context.Context, ref string) (ImageLayout, error)
}

// ImageLayout is what an image holds for a VM (host paths).
type ImageLayout struct {
	// Digest is the manifest digest the image resolved to: the key of
	// its cache entry.
	Digest               string
	DiskPath, DiskFormat string
	// DiskVirtualSize is the size of the disk the guest sees (what the
	// VM's overlay may grow to), in bytes.
	DiskVirtualSize int64
	Kernel, Initrd  string
	KernelArgs      string
}

// DefaultMaxDiskVirtualSize caps the disk a VM image may declare when
// Options.MaxDiskVirtualSize is 0.
const DefaultMaxDiskVirtualSize = 64 << 30

// Cgroups manages the VM's cgroup under the pod's cgroup parent.
type Cgroups interface {
	Create(VMCgroup) error
	Update(VMCgroup) error
	Remove(VMCgroup) error
	Stats(VMCgroup) (CgroupUsage, error)
	// Place moves process pid into the VM's cgroup (a share's virtiofsd).
	Place(cg VMCgroup, pid int) error
	// MemoryRoom is the memory limit of a pod's cgroup parent, which the
	// VM and qemu share; limited is false when it has none.
	MemoryRoom(parent string) (limit int64, limited bool, err error)
}

// VMCgroup is the cgroup a VM's qemu runs in.
type VMCgroup struct {
	Parent, Name        string
	CPUQuota, CPUPeriod int64
	CPUShares           uint64
	MemoryLimit         int64
	// CPUs and Mems pin every thread of the VM (vCPUs, qemu's own,
	// virtiofsd) to kubelet's cpuset; "" is the pod's.
	CPUs, Mems string
}

// Connection is the VM runtime's way to libvirtd: virt.Conn on a host,
// the fake (virtfake) in unit tests.
type Connection interface {
	// Get returns the live connection, or Unavailable while there is none.
	Get() (virt.Libvirt, error)
}

// Runtime is the VM runtime's core: its parts, and the life cycle every
// room of the runtime shares. No room embeds it: each declares the
// methods and parts it uses of it.
type Runtime struct {
	Opts Options
	// Accel is the accelerator VMs get (kvm or tcg): Opts.Accel resolved.
	Accel   string
	Store   *store.Store
	Conn    Connection
	Images  ImageReader
	Cgroups Cgroups
	CIData  cidata.Writer
	// Networks are the VM pods' networks (Networks.Net nil: VM pods
	// have none).
	Networks *vmnet.Networks
	// Shares runs the virtiofsd of VM shares; nil: VMs get no shares.
	Shares vmstorage.Shares
	// Migration is this node's part in live migrations; nil:
	// VMs neither leave nor arrive.
	Migration *migration.Node
	Locks     opguard.Locks
	Console   *console.Consoles
	Events    *vmevents.Hub
	Reboots   *rebootwatch.Watch
	// Starts are the qemu starts in flight, for the placement server.
	Starts *Starts
	// Boots watch cold-booted guests for a sign of their OS; guests
	// read their signs and tell what they find (notices.go).
	Boots  *bootwatch.Watcher
	guests *bootwatch.Guests
	// NoSpace are the VMs qemu paused on a full disk.
	NoSpace  *nospace.VMs
	Log      *slog.Logger
	Counters vmcounters.Counters
	// AfterResync runs on every (re)connect once the store has caught up
	// with libvirt (the collector's pass); first is true the first time.
	AfterResync func(ctx context.Context, first bool)
	// AfterReboot runs on every reboot event of a domain, once the soft
	// reboots waiting for it are woken (a resized guest brought back to
	// its size, package resize).
	AfterReboot func(ctx context.Context, l virt.Libvirt, domain string)
	// BootTime is when the node booted (nil: HostBootTime).
	BootTime func() time.Time
	// RootDisks check a VM's root disk before each start of its qemu
	// (starts.go); nil checks none.
	RootDisks RootDisks
	// IDs hand out Opts.Identities: to pods, and to what holds them
	// beside (templates being made: package instant, HeldBy).
	IDs *vmidentity.Allocator

	// firstConnect is set once the first pass after start ran; recovered
	// is closed then.
	firstConnect atomic.Bool
	recovered    chan struct{}
	// snapshotCap is the cap a reload set (SetMaxSnapshots); 0: none
	// set, Opts.MaxSnapshotsPerVM holds.
	snapshotCap atomic.Int64
}

// Parts are what a Runtime is made of besides its options.
type Parts struct {
	Store   *store.Store
	Conn    Connection
	Images  ImageReader
	Cgroups Cgroups
	Net     vmnet.PodNetwork
	// CIData writes the cloud-init volumes; nil is cidata.ISO.
	CIData cidata.Writer
	Shares vmstorage.Shares
	Log    *slog.Logger
}

// New makes the core of a runtime from its parts; nothing runs yet.
func New(opts Options, p Parts) *Runtime {
	if opts.Counters == nil {
		opts.Counters = vmcounters.None{}
	}
	log := p.Log.With("runtime", "vm")
	if p.CIData == nil {
		p.CIData = cidata.ISO{}
	}
	r := &Runtime{
		Opts: opts, Accel: hostcaps.ResolveAccel(opts.Accel, hostcaps.KVMProbe(opts.Identities.Count > 0), log), Store: p.Store, Conn: p.Conn, Images: p.Images, Cgroups: p.Cgroups,
		Networks: &vmnet.Networks{Net: p.Net, Store: p.Store, Log: log, Peers: opts.PeerSandboxes}, CIData: p.CIData, Shares: p.Shares, Console: console.New(log), Events: vmevents.NewHub(), Reboots: rebootwatch.New(), Starts: &Starts{}, Log: log,
		Counters: opts.Counters, recovered: make(chan struct{}),
	}
	r.IDs = vmidentity.New(opts.Identities, p.Store)
	r.NoSpace = &nospace.VMs{Core: r, Log: log, StateDir: opts.StateDir}
	r.guests = bootwatch.NewGuests(opts.GuestBootTimeout, bootHost{r}, r.Counters, r.Accel, log)
	r.Boots = r.guests.Watcher
	return r
}

// NewID returns a new pod or container ID: 32 hex digits.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// VMDir is the directory of the VM of container id.
func (r *Runtime) VMDir(id string) string { return filepath.Join(r.Opts.StateDir, "vms", id) }

// Recovered is closed once the runtime has caught up with what runs after
// a start: libvirtd answered, the store was resynced with it, and the
// first collector pass (finishing teardowns, adopting this crimux's
// orphans) ran. It stays open while libvirtd is unreachable.
func (r *Runtime) Recovered() <-chan struct{} { return r.recovered }

// CgroupUsage is what a VM's cgroup has used: CPU time, the memory charged
// to it, and that less its inactive file pages (the working set, as
// kubelet counts it).
type CgroupUsage struct {
	CPUNanos                     uint64
	MemoryBytes, WorkingSetBytes uint64
}
