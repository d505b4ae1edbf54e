// Package libvirt is crimux's VM runtime: a VM pod (RuntimeClass handler
// "vm") is one libvirt domain run by qemu, its container is the VM, its
// image an OCI image holding a disk and/or a kernel. This package wires
// the runtime's rooms together and hands it to the registry (Factory).
// Every package under it, top floor first (packagemap_test.go checks
// that the list names them all):
//
//	criservice/       the CRI face (sandbox, container, status, stats, attach)
//	vmops/            the VM API's operations (power, reboot, snapshots)
//	gc/               the collector (teardowns, orphans, foreign resources)
//	instant/          VMs started from booted templates (making, keeping, cloning; the VM API's templates)
//	migrate/          the node's half of a live migration (describe, prepare, send, receive, seals)
//	rootdisk/         a VM's root disk: the pod's overlay or a volume of its own (claims, checks)
//	resize/           a VM's size: its room to grow, its fit in its pod, in-place resize
//	vmstats/          a VM measured: cgroup, guest memory, overlay disk, I/O (CRI stats, metrics)
//	core/             the parts and the VM life cycle every room shares
//	core/coretest/    a core on fakes, for the rooms' unit tests
//	vmstorage/        a VM's devices and shares judged against the host, handed to a starting qemu
//	snapcarry/        a pod's snapshots saved from one VM and carried to its next
//	vmfiles/          the layout of a pod's and a VM's files, made root's; the console socket dialled
//	vmidentity/       the VM pods' own uids and gids, handed out and given their files
//	hostcaps/         what the host offers VMs (accelerator, huge pages, libvirt's directories)
//	rebootwatch/      libvirt's reboot events handed to the soft reboots waiting for them
//	cidata/           a VM's cloud-init volume made from its pod and written into its directory
//	opguard/          per-key locks and the rollback of a half-done operation
//	vmnet/            a VM pod's network glue: set up, torn down, NIC, readiness
//	vmcounters/       what the VM runtime counts, and the labels it counts by
//	nospace/          VMs qemu paused on a full disk, resumed once there is room
//	migration/        a node's part in live migrations (listener, seals)
//	store/            the records of what kubelet asked for (bbolt)
//	store/rebuild/    a damaged store made again from what libvirt holds
//	virt/             the one interface to libvirt
//	virt/virtfake/    an in-memory libvirtd for unit tests
//	placer/           qemu placed in the pod's cgroup before it runs
//	rootvol/          a VM's root disk on a volume
//	placement/        the wire between the qemu wrapper and the placer
//	migproxy/         a live migration's data carried between nodes
//	console/          serial console -> CRI log
//	virtiofs/         virtiofsd serving a pod's shared directory
//	bootwatch/        a guest stuck in its firmware or boot loader
//	vmevents/         the CRI container events fanned out to their streams
//	podnet/           the pod network of a VM (CNI, tap, DHCP)
//	qcow2/            the VM's root disk and overlays
//	vmimage/          VM images out of containerd's store
//	agent/            commands in the guest through its agent
//	template/         the templates' files and their identity
//	saveimage/        libvirt save images read and fed to clones
//
// Arrows run one way, down this list's floors: this package imports the
// rooms; criservice, vmops, gc, instant, migrate, rootdisk and resize
// import core; criservice imports migrate, instant and resize; instant
// imports resize; core imports store, console and virt, and the leaves
// from vmstorage to vmcounters, which import no core; nothing but virt
// imports go-libvirt (internal/archtest). vmstats imports core too, and
// criservice imports vmstats.
package libvirt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/crimux/crimux/internal/identity"
	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/criservice"
	"github.com/crimux/crimux/runtimes/libvirt/gc"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/migrate"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/resize"
	"github.com/crimux/crimux/runtimes/libvirt/rootdisk"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virtiofs"
	"github.com/crimux/crimux/runtimes/libvirt/vmcounters"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/runtimes/libvirt/vmnet"
	"github.com/crimux/crimux/runtimes/libvirt/vmops"
	"github.com/crimux/crimux/runtimes/libvirt/vmstats"
)

// Options configure the VM runtime (see core.Options).
type Options = core.Options

// GuestBoot is what Options.OnGuestBoot hears of a guest's boot.
type GuestBoot = bootwatch.GuestBoot

// IdentityRange is the uids and gids VM pods' qemu run as (see vmidentity.Range).
type IdentityRange = vmidentity.Range

// AgentCaps bound the guest-agent calls in flight (see virt.AgentCaps).
type AgentCaps = virt.AgentCaps

// TemplateLimits bound the VM templates (see core.TemplateLimits).
type TemplateLimits = core.TemplateLimits

// Counters is what the VM runtime counts (see vmcounters.Counters).
type Counters = vmcounters.Counters

// ImageReader and ImageLayout: how the runtime reads VM images.
type (
	ImageReader = core.ImageReader
	ImageLayout = core.ImageLayout
)

// Cgroups and VMCgroup: how the runtime manages a VM's cgroup.
type (
	Cgroups  = core.Cgroups
	VMCgroup = core.VMCgroup
)

// Runtime is the VM runtime, wired: its core, its CRI face, its half of
// live migrations, its templates, its VM operations, the meter of its
// VMs (metrics), its collector and the libvirtd connection they share.
type Runtime struct {
	core    *core.Runtime
	cri     *criservice.Service
	migrate *migrate.Room
	instant *instant.Room
	ops     *vmops.Ops
	stats   *vmstats.Meter
	gc      *gc.Collector
	conn    *virt.Conn
	stop    context.CancelFunc
	closers []func() error
}

// closeTimeout bounds how long Close waits for libvirtd to confirm the
// connection's close.
const closeTimeout = 5 * time.Second

// New opens the store and starts the libvirtd connection; Close undoes it.
func New(ctx context.Context, opts Options, images ImageReader, cgroups Cgroups, log *slog.Logger) (*Runtime, error) {
	rt := &Runtime{}
	conn, err := virt.NewConn(opts.URI, log.With("runtime", "vm"), func(ctx context.Context, l virt.Libvirt) {
		rt.core.OnConnect(ctx, l)
	}, reconnected(opts.Counters))
	if err != nil {
		return nil, err
	}
	conn.SetAgentCaps(opts.AgentCalls)
	countAgentCalls(conn.AgentSlots(), opts.Counters)
	if opts.Instance == "" {
		if opts.Instance, err = identity.Load(opts.StateDir); err != nil {
			return nil, fmt.Errorf("instance identity: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "vms"), 0o711); err != nil {
		return nil, err
	}
	st, err := store.Open(opts.StateDir)
	if err != nil {
		return nil, err
	}
	st.OnCopyError(func(path string, err error) {
		log.Warn("record copy not written: crimuxctl store rebuild would find the one before", "runtime", "vm", "path", path, "err", err)
	})
	net, err := podNetwork(opts, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	rt.wire(opts, core.Parts{Store: st, Conn: conn, Images: images, Cgroups: cgroups, Net: net,
		Shares: &virtiofs.Daemons{Log: log.With("component", "virtiofs")}, Log: log}, conn)
	if err := rt.start(opts); err != nil {
		st.Close()
		return nil, err
	}
	return rt, nil
}

// TemplatesDir holds the VM templates, under the state dir.
const TemplatesDir = "templates"

// wire makes the rooms on one core.
func (rt *Runtime) wire(opts Options, p core.Parts, conn *virt.Conn) {
	rt.core = core.New(opts, p)
	rt.cri, rt.ops, rt.gc, rt.conn = criservice.New(rt.core), vmops.New(rt.core), gc.New(rt.core), conn
	rt.migrate = migrate.New(rt.core)
	rt.cri.Arrivals = rt.migrate
	disks := rootdisk.New(rootdisk.CoreOf(rt.core))
	rt.core.RootDisks, rt.cri.RootDisks, rt.migrate.RootVolumes = disks, disks, disks
	resizer := resize.New(resize.CoreOf(rt.core))
	rt.cri.Resizer, rt.core.AfterReboot = resizer, resizer.AfterReboot
	rt.stats = vmstats.New(vmstats.CoreOf(rt.core))
	rt.cri.Meter = rt.stats
	rt.instant = &instant.Room{R: instant.CoreOf(rt.core)}
	rt.cri.Clones = rt.instant
	if !opts.TemplatesOff {
		lim := opts.TemplateLimits
		m := &instant.Maker{R: rt.instant.R, Store: template.Store{Dir: filepath.Join(opts.StateDir, TemplatesDir)},
			Parent: opts.TemplateParent, ShareAcrossNamespaces: lim.ShareAcrossNamespaces,
			Limits: instant.Limits{MaxMaking: lim.MaxMaking, MaxKept: lim.MaxKept, RetryAfter: lim.RetryAfter, CPUMillis: lim.CPUMillis}}
		rt.instant.Maker, rt.gc.Templates, rt.gc.Making = m, &m.Store, m
	}
	rt.core.AfterResync = func(ctx context.Context, first bool) {
		if first {
			rt.migrate.ResumeMigrations(ctx)
		}
		rt.gc.CollectGarbage(ctx, first)
	}
}

// start runs the connection, the streaming server, the collector and the
// placement server, and resumes what runs: console copiers and DHCP.
func (rt *Runtime) start(opts Options) error {
	if opts.Migration != nil { // before the first resync, which resumes migrations
		node, err := migration.Start(*opts.Migration, rt.core.Log.With("component", "migration"))
		if err != nil {
			return err
		}
		rt.core.Migration = node
		rt.closers = append(rt.closers, node.Close)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	rt.stop = cancel
	go rt.conn.Run(runCtx)
	if err := rt.cri.Serve(runCtx, opts.StreamingAddr); err != nil {
		cancel()
		_ = rt.core.Migration.Close()
		return err
	}
	go rt.gc.Run(runCtx)
	go rt.core.NoSpace.ResumeWhenRoom(runCtx)
	if opts.PlacementSocket != "" {
		servePlacement(runCtx, opts.PlacementSocket, rt.core, rt.placement)
	}
	rt.core.ResumeConsoles()
	rt.core.Networks.Resume()
	return nil
}

// podNetwork is the VM pods' network (podnet); nil without one.
func podNetwork(opts Options, log *slog.Logger) (vmnet.PodNetwork, error) {
	if opts.Network == nil {
		return nil, nil
	}
	nc := *opts.Network
	nc.Instance = opts.Instance
	m, err := podnet.NewManager(nc, log.With("runtime", "vm", "component", "podnet"))
	if err != nil {
		return nil, fmt.Errorf("VM pod network: %w", err)
	}
	return m, nil
}

// countAgentCalls hands the guest-agent call slots' waits and refusals
// to c (nil: nobody).
func countAgentCalls(slots *virt.AgentSlots, c Counters) {
	if c == nil {
		return
	}
	slots.Report(virt.AgentSlotReports{Refused: c.AgentCallRefused, Waited: c.AgentCallWaited})
}

func reconnected(c Counters) func(string) {
	if c == nil {
		return nil
	}
	return c.Reconnected
}

// Recovered is closed once the runtime has caught up with what runs after
// a start: libvirtd answered, the store was resynced with it, and the
// first collector pass (finishing teardowns, adopting this crimux's
// orphans) ran. It stays open while libvirtd is unreachable.
func (rt *Runtime) Recovered() <-chan struct{} { return rt.core.Recovered() }

// PowerStateCounts counts the VMs by power state (metrics).
func (rt *Runtime) PowerStateCounts() (map[string]int, error) { return rt.stats.PowerStateCounts() }

// Close stops the connection, the console copiers and closes the store.
// VMs keep running: qemu outlives crimux.
func (rt *Runtime) Close() error {
	rt.stop()
	select { // libvirtd may hang; crimux's shutdown must not
	case <-rt.conn.Done():
	case <-time.After(closeTimeout):
		rt.core.Log.Warn("libvirtd connection not closed in time", "timeout", closeTimeout)
	}
	rt.core.Console.StopAll()
	rt.core.Boots.ForgetAll()
	if rt.core.Networks.Net != nil {
		rt.core.Networks.Net.Close()
	}
	for _, c := range rt.closers {
		_ = c()
	}
	return rt.core.Store.Close()
}

// placement answers the placement server: of a template being made, its
// Maker (package instant); of a pod's VM, the core.
func (rt *Runtime) placement() instant.Placement {
	return instant.Placement{Maker: rt.instant.Maker, Core: rt.core}
}
