// Package libvirt is crimux's VM runtime: a VM pod (RuntimeClass handler
// "vm") is one libvirt domain run by qemu, its container is the VM, its
// image an OCI image holding a disk and/or a kernel.
//
// The runtime serves the CRI RuntimeService in-process (over an in-memory
// gRPC connection, so the CRI server routes to it exactly as to containerd
// and its IDs get the "vm--" prefix on the way out). A bbolt store under
// the state dir is the truth about what kubelet asked for; libvirt is the
// truth about what runs; crimux's identity stamp in each domain's
// <metadata> ties the two together after a restart.
//
// What a VM is made of, per container, under <state>/vms/<id>/:
//
//	disk.qcow2     qcow2 overlay on the read-only image disk (removed with the container)
//	console.log    every byte of the serial console, written by libvirt's virtlogd
//	console.sock   the serial console, for Attach
//
// Lifecycle of a container record (the state machine):
//
//	CREATED --StartContainer--> RUNNING --guest power-off / StopContainer / crash--> EXITED
//	any --RemoveContainer--> (gone: domain undefined, overlay, cgroup and dir removed)
package libvirt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/identity"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
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
	// MemoryOverheadMiB is added to the VM's RAM for its cgroup limit:
	// qemu's own memory (TCG translation cache, device emulation).
	MemoryOverheadMiB int64
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
	Counters Counters
}

// Counters is what the VM runtime counts, injected by the daemon
// (*metrics.Metrics implements it).
type Counters interface {
	// GCRemoved counts n resources of a kind the collector removed.
	GCRemoved(kind string, n int)
	// Reconnected counts a reconnect to a daemon at target.
	Reconnected(target string)
}

// noCounters counts nothing.
type noCounters struct{}

func (noCounters) GCRemoved(string, int) {}
func (noCounters) Reconnected(string)    {}

// ImageReader gets a VM image's files out of the image store.
type ImageReader interface {
	Prepare(ctx context.Context, ref string) (ImageLayout, error)
}

// ImageLayout is what an image holds for a VM (host paths).
type ImageLayout struct {
	DiskPath, DiskFormat string
	Kernel, Initrd       string
	KernelArgs           string
}

// Cgroups manages the VM's cgroup under the pod's cgroup parent.
type Cgroups interface {
	Create(VMCgroup) error
	Update(VMCgroup) error
	Remove(VMCgroup) error
	Stats(VMCgroup) (cpuNanos, memoryBytes uint64, err error)
}

// VMCgroup is the cgroup a VM's qemu runs in.
type VMCgroup struct {
	Parent, Name        string
	CPUQuota, CPUPeriod int64
	CPUShares           uint64
	MemoryLimit         int64
}

// Runtime is the VM runtime.
type Runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	opts    Options
	accel   string
	store   *store
	conn    *conn
	images  ImageReader
	cgroups Cgroups
	// net is the pod network; nil: VM pods have none.
	net     PodNetwork
	locks   keyedMutex
	console *consoles
	events  *eventHub
	reboots *rebootWatch
	log     *slog.Logger
	stop    context.CancelFunc
	// streaming serves Attach to the serial console.
	streaming streaming.Server
	closers   []func() error
	counters  Counters
	// firstConnect is set once the first collector pass after start ran;
	// recovered is closed then.
	firstConnect atomic.Bool
	recovered    chan struct{}
}

// closeTimeout bounds how long Close waits for libvirtd to confirm the
// connection's close.
const closeTimeout = 5 * time.Second

// New opens the store and starts the libvirtd connection; Close undoes it.
func New(ctx context.Context, opts Options, images ImageReader, cgroups Cgroups, log *slog.Logger) (*Runtime, error) {
	if opts.Counters == nil {
		opts.Counters = noCounters{}
	}
	socket, err := socketOf(opts.URI)
	if err != nil {
		return nil, err
	}
	if opts.Instance == "" {
		if opts.Instance, err = identity.Load(opts.StateDir); err != nil {
			return nil, fmt.Errorf("instance identity: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "vms"), 0o711); err != nil {
		return nil, err
	}
	st, err := openStore(opts.StateDir)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		opts: opts, accel: resolveAccel(opts.Accel), store: st, images: images, cgroups: cgroups,
		console: newConsoles(log), events: newEventHub(), reboots: newRebootWatch(), log: log.With("runtime", "vm"), counters: opts.Counters,
		recovered: make(chan struct{}),
	}
	if opts.Network != nil {
		nc := *opts.Network
		nc.Instance = opts.Instance
		m, err := podnet.NewManager(nc, r.log.With("component", "podnet"))
		if err != nil {
			st.close()
			return nil, fmt.Errorf("VM pod network: %w", err)
		}
		r.net = m
	}
	r.conn = &conn{uri: opts.URI, socket: socket, log: r.log, onConnect: r.onConnect, onReconnect: opts.Counters.Reconnected, done: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go r.conn.run(runCtx)
	if err := r.startStreaming(runCtx, opts.StreamingAddr); err != nil {
		cancel()
		st.close()
		return nil, err
	}
	go r.runCollector(runCtx)
	if opts.PlacementSocket != "" {
		r.servePlacement(runCtx, opts.PlacementSocket)
	}
	r.resumeConsoles()
	r.resumeNetworks()
	return r, nil
}

// Recovered is closed once the runtime has caught up with what runs after
// a start: libvirtd answered, the store was resynced with it, and the
// first collector pass (finishing teardowns, adopting this crimux's
// orphans) ran. It stays open while libvirtd is unreachable.
func (r *Runtime) Recovered() <-chan struct{} { return r.recovered }

// Close stops the connection, the console copiers and closes the store.
// VMs keep running: qemu outlives crimux.
func (r *Runtime) Close() error {
	r.stop()
	select { // libvirtd may hang; crimux's shutdown must not
	case <-r.conn.done:
	case <-time.After(closeTimeout):
		r.log.Warn("libvirtd connection not closed in time", "timeout", closeTimeout)
	}
	r.console.stopAll()
	if r.net != nil {
		r.net.Close()
	}
	for _, c := range r.closers {
		_ = c()
	}
	return r.store.close()
}

// resolveAccel turns auto into kvm when /dev/kvm exists, else tcg.
func resolveAccel(accel string) string {
	if accel != "auto" && accel != "" {
		return accel
	}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		return vm.AccelKVM
	}
	return vm.AccelTCG
}

// newID returns a new pod or container ID: 32 hex digits.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r *Runtime) vmDir(id string) string { return filepath.Join(r.opts.StateDir, "vms", id) }

// keyedMutex serialises operations on one pod without a global lock.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	sync.Mutex
	refs int
}

// lock takes the lock of key and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
