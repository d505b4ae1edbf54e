// Package coretest builds a VM runtime core for unit tests: a real store
// in a temporary directory, the in-memory libvirtd (virtfake), and fakes
// of the pod network, the image store and the cgroups that record what
// they are asked and fail on demand. No daemon, no root: milliseconds.
package coretest

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/runtimes/libvirt/bootwatch"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/vmtypes"
)

// Env is a runtime core on fakes.
type Env struct {
	R        *core.Runtime
	Libvirt  *virtfake.Libvirt
	Net      *Net
	Images   *Images
	CIData   *CIData
	Cgroups  *Cgroups
	Counters *Counters
	Dir      string
}

// Options change what New makes.
type Options struct {
	// NoNetwork runs VM pods without a pod network.
	NoNetwork bool
	// Instance is crimux's identity; "i" when empty.
	Instance string
	// Identities gives every VM pod a uid and gid of its own (root only:
	// its files are chowned); none by default.
	Identities vmidentity.Range
	// GuestBootTimeout and OnGuestBoot: core.Options' (no boot watch by
	// default).
	GuestBootTimeout time.Duration
	OnGuestBoot      func(bootwatch.GuestBoot)
}

// New returns a runtime core on fakes, closed at the end of the test.
func New(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Instance == "" {
		o.Instance = "i"
	}
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := os.MkdirAll(filepath.Join(dir, "vms"), 0o711); err != nil {
		t.Fatal(err)
	}
	e := &Env{Libvirt: virtfake.New(), Images: &Images{}, Cgroups: &Cgroups{}, Counters: &Counters{}, CIData: &CIData{}, Dir: dir}
	p := core.Parts{Store: st, Conn: e.Libvirt, Images: e.Images, Cgroups: e.Cgroups, CIData: e.CIData, Log: Logger()}
	if !o.NoNetwork {
		e.Net = &Net{}
		p.Net = e.Net
	}
	e.R = core.New(core.Options{StateDir: dir, Accel: "tcg", Emulator: "/usr/bin/true", Instance: o.Instance,
		MemoryOverheadMiB: 64, Counters: e.Counters, Identities: o.Identities,
		GuestBootTimeout: o.GuestBootTimeout, OnGuestBoot: o.OnGuestBoot}, p)
	e.R.RootDisks = UncheckedDisks{}
	t.Cleanup(e.R.Console.StopAll)
	t.Cleanup(e.R.Boots.ForgetAll)
	return e
}

// UncheckedDisks is the root disk check of a core on fakes: its VMs'
// disks are files no room made, so none is checked. A test of the CRI
// face wires the real room (package rootdisk) over it.
type UncheckedDisks struct{}

// CheckRootDisk lets every VM start.
func (UncheckedDisks) CheckRootDisk(*store.Container) error { return nil }

// Logger discards.
func Logger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// PutPod records a ready VM pod named after id, as RunPodSandbox leaves
// it (with a network that is up when the env has one); edit may change
// it first.
func (e *Env) PutPod(t testing.TB, id string, edit func(*store.Sandbox)) *store.Sandbox {
	t.Helper()
	sb := &store.Sandbox{ID: id, Handler: "vm", State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Now().UnixNano(),
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: id, Namespace: "ns", Uid: id + "-uid"},
			Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod" + id}}}
	if e.Net != nil {
		sb.Net = upAttachment(id)
	}
	if edit != nil {
		edit(sb)
	}
	if err := e.R.Store.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// PutVM records the VM of pod sbID with container ID id in state, with
// power state power, and defines its domain in the fake libvirtd in the
// matching state (running for a running VM whose power state runs).
func (e *Env) PutVM(t testing.TB, sbID, id string, state runtimeapi.ContainerState, power vmtypes.PowerState) *store.Container {
	t.Helper()
	c := &store.Container{ID: id, SandboxID: sbID, Domain: "crimux-" + id, Dir: e.R.VMDir(id), State: state, PowerState: power,
		VCPUs: 1, MemoryMiB: 128, Accel: "tcg", CgroupParent: "/kubepods/pod" + sbID, CreatedAt: time.Now().UnixNano(),
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm"},
			Image: &runtimeapi.ImageSpec{Image: "vm-image"}}}
	if state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.StartedAt = c.CreatedAt
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.R.Store.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	sb, err := e.R.Store.Sandbox(sbID)
	if err == nil {
		sb.ContainerID = id
		if err := e.R.Store.PutSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	e.Libvirt.Put(c.Domain, virtfake.Domain{State: domainState(state, power), ManagedSave: power == vmtypes.PowerHibernate})
	return c
}

func domainState(state runtimeapi.ContainerState, power vmtypes.PowerState) (s virtStateT) {
	if state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return stateShutoff
	}
	switch power {
	case vmtypes.PowerPaused:
		return statePaused
	case vmtypes.PowerShutdown, vmtypes.PowerHibernate:
		return stateShutoff
	}
	return stateRunning
}

// Counters counts what the runtime counts.
type Counters struct {
	mu         sync.Mutex
	removed    map[string]int
	reconnects int
	// migrations counts ended migrations by "role result"; progress is
	// the last progress by container.
	migrations map[string]int
	progress   map[string][2]uint64
	// events counts the other events, timed are the durations observed
	// (counters.go).
	events map[string]int
	timed  map[string][]time.Duration
}

func (c *Counters) MigrationProgress(container string, remaining, dirtyRate uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.progress == nil {
		c.progress = map[string][2]uint64{}
	}
	c.progress[container] = [2]uint64{remaining, dirtyRate}
}

func (c *Counters) MigrationEnded(container, role, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.migrations == nil {
		c.migrations = map[string]int{}
	}
	c.migrations[role+" "+result]++
	delete(c.progress, container)
}

// Migrations is how many migrations ended in role with result.
func (c *Counters) Migrations(role, result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.migrations[role+" "+result]
}

func (c *Counters) GCRemoved(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed == nil {
		c.removed = map[string]int{}
	}
	c.removed[kind] += n
}

func (c *Counters) Reconnected(string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconnects++
}

// Removed is how many resources of a kind were counted as removed.
func (c *Counters) Removed(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed[kind]
}
