package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
	"github.com/crimux/crimux/runtimes/libvirt"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
)

// vmLikeBackend declares the abilities the daemon asks a VM runtime for,
// without being the libvirt runtime.
type vmLikeBackend struct {
	recovered chan struct{}
	counts    map[string]int
}

func (vmLikeBackend) Runtime() runtimeapi.RuntimeServiceClient    { return nil }
func (vmLikeBackend) Images() runtimeapi.ImageServiceClient       { return nil }
func (vmLikeBackend) Close() error                                { return nil }
func (b vmLikeBackend) Recovered() <-chan struct{}                { return b.recovered }
func (b vmLikeBackend) PowerStateCounts() (map[string]int, error) { return b.counts, nil }

// plainBackend declares no ability.
type plainBackend struct{}

func (plainBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (plainBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (plainBackend) Close() error                             { return nil }

type backendFactory struct{ b registry.Backend }

func (f backendFactory) Key(rt config.Runtime) string { return rt.Name }
func (f backendFactory) New(context.Context, config.Runtime, *idcodec.Codec) (registry.Backend, error) {
	return f.b, nil
}

// TestDaemonAsksAbilities: the daemon waits for and counts the VMs of any
// backend declaring the abilities (registry.Recoverer,
// registry.PowerStateCounter), and skips the others.
func TestDaemonAsksAbilities(t *testing.T) {
	vm := vmLikeBackend{recovered: make(chan struct{}), counts: map[string]int{"running": 2, "paused": 1}}
	close(vm.recovered)
	reg, err := registry.New(context.Background(), config.Default(), map[string]registry.Factory{
		config.TypeContainer: backendFactory{plainBackend{}}, config.TypeVM: backendFactory{vm},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(config.Default(), flags{}, nil, io.Discard)
	d.cri = cri.New(reg, d.log)
	counts, err := d.vmPowerStates()
	if err != nil || counts["running"] != 2 || counts["paused"] != 1 || len(counts) != 2 {
		t.Errorf("vmPowerStates = %v, %v; want running 2, paused 1", counts, err)
	}
	done := make(chan struct{})
	go func() { d.recoverRuntimes(context.Background(), reg); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("recoverRuntimes still waits for a backend that has recovered")
	}
}

// TestFactoriesCountIntoMetrics: both runtimes count into the daemon's
// metrics (GC removals, reconnects).
func TestFactoriesCountIntoMetrics(t *testing.T) {
	d := newDaemon(config.Default(), flags{}, nil, io.Discard)
	f := d.factories(config.Default(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if c := f[config.TypeContainer].(containerd.Factory).Counters; c != containerd.Counters(d.metrics) {
		t.Errorf("containerd.Factory.Counters = %v, want the daemon's metrics", c)
	}
	if c := f[config.TypeVM].(libvirt.Factory).Options.Counters; c != libvirt.Counters(d.metrics) {
		t.Errorf("libvirt.Options.Counters = %v, want the daemon's metrics", c)
	}
}

// reconfigurable records the live libvirt keys a reload hands it.
type reconfigurable struct {
	plainBackend
	got *libvirt.Live
}

func (r reconfigurable) Reconfigure(l libvirt.Live) { *r.got = l }

// TestLiveVMReachesTheVMRuntime: a reload hands the live libvirt keys of
// the new config to a backend with the ability (the VM runtime's), and
// to no other.
func TestLiveVMReachesTheVMRuntime(t *testing.T) {
	var got libvirt.Live
	reg, err := registry.New(context.Background(), config.Default(), map[string]registry.Factory{
		config.TypeContainer: backendFactory{plainBackend{}}, config.TypeVM: backendFactory{reconfigurable{got: &got}},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := config.Default().Libvirt
	l.AgentCallsPerVM, l.AgentCallsPerNode, l.GuestBootTimeout = 1, 3, config.Duration{Duration: time.Minute}
	l.MaxSnapshotsPerVM, l.GCInterval = 5, config.Duration{Duration: 30 * time.Second}
	l.TemplateMaxMaking, l.TemplateMaxKept, l.TemplateRetryAfter, l.TemplateCPUMillis = 2, 4, config.Duration{Duration: time.Hour}, 500
	l.Migration.BandwidthMiB, l.Migration.ProgressTimeout = 100, config.Duration{Duration: 20 * time.Second}
	l.Migration.CompletionTimeoutPerGiB, l.Migration.TargetTimeout = config.Duration{Duration: time.Minute}, config.Duration{Duration: 2 * time.Minute}
	liveVM(reg, l)
	want := libvirt.Live{AgentCalls: libvirt.AgentCaps{PerVM: 1, PerNode: 3}, GuestBootTimeout: time.Minute,
		MaxSnapshotsPerVM: 5, GCInterval: 30 * time.Second,
		Templates: instant.Limits{MaxMaking: 2, MaxKept: 4, RetryAfter: time.Hour, CPUMillis: 500},
		Migration: migration.Tunables{BandwidthMiB: 100, ProgressTimeout: 20 * time.Second, CompletionTimeoutPerGiB: time.Minute, TargetTimeout: 2 * time.Minute}}
	if got != want {
		t.Fatalf("the VM runtime got %+v, want %+v", got, want)
	}
}

// timeoutable records the call timeout a reload hands it.
type timeoutable struct {
	plainBackend
	got *time.Duration
}

func (r timeoutable) SetCallTimeout(d time.Duration) { *r.got = d }

var _ containerd.CallTimeouter = timeoutable{}

// TestLiveContainerdReachesTheContainerRuntime: a reload hands
// containerd.call_timeout to a backend with the ability (a container
// runtime's).
func TestLiveContainerdReachesTheContainerRuntime(t *testing.T) {
	var got time.Duration
	reg, err := registry.New(context.Background(), config.Default(), map[string]registry.Factory{
		config.TypeContainer: backendFactory{timeoutable{got: &got}}, config.TypeVM: backendFactory{plainBackend{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	liveContainerd(reg, 42*time.Second)
	if got != 42*time.Second {
		t.Fatalf("the container runtime got %s, want 42s", got)
	}
}
