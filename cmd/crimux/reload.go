package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
	"github.com/crimux/crimux/runtimes/libvirt"
	"github.com/crimux/crimux/runtimes/libvirt/instant"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
)

// maxDrain bounds how long a reload waits for the calls in flight on the
// old registry before closing the runtimes the new config dropped.
const maxDrain = 5 * time.Minute

// reload re-reads the config on SIGHUP, with the same flags over it, and
// swaps in a registry built from it: runtimes can be added and removed
// without a restart, and the backends of unchanged runtimes are taken over
// as they are (registry.Rebuild), so running pods are not disturbed; a
// kept VM runtime takes the live libvirt keys (liveVM). An invalid
// config, runtimes that cannot be built, or a changed key that only a
// restart applies leave the old config in force, whole: the log, the
// metrics and the reload status (crimux reload, systemctl reload) say why.
func (d *daemon) reload(ctx context.Context) {
	d.notify.send(reloading())
	err := d.applyConfig(ctx)
	d.metrics.ObserveReload(err)
	if err != nil {
		d.log.Error("config reload failed; the old config stays in force", "config", d.flags.configPath, "err", err)
	}
	d.reloads.record(err, d.log)
	d.notify.send("READY=1")
}

func (d *daemon) applyConfig(ctx context.Context) error {
	cfg, err := loadConfig(d.flags, d.fs)
	if err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	if keys := restartOnlyChanges(d.cfg, cfg); len(keys) > 0 {
		return fmt.Errorf("%s cannot change while crimux runs: restart crimux to apply the new value (nothing of this config was applied)",
			strings.Join(keys, ", "))
	}
	old := d.cri.Registry()
	reg, closeOld, err := registry.Rebuild(ctx, cfg, d.newFactories(cfg, d.log), old)
	if err != nil {
		return fmt.Errorf("runtimes: %w", err)
	}
	d.cri.SetRegistry(reg)
	inFlight := d.calls.rotate()
	go func() {
		if !waitTimeout(inFlight, maxDrain) {
			d.log.Warn("calls on the old runtimes still running; closing the dropped runtimes anyway", "after", maxDrain)
		}
		closeOld()
	}()
	liveVM(reg, cfg.Libvirt)
	liveContainerd(reg, cfg.Containerd.CallTimeout.Duration)
	d.level.Set(parseLevel(cfg.LogLevel))
	d.cfg = cfg
	d.log.Info("config reloaded", "config", d.flags.configPath, "runtimes", runtimeNames(reg))
	return nil
}

// liveVM hands the live libvirt keys to the VM runtimes of reg (a new one
// has them already).
func liveVM(reg *registry.Registry, l config.Libvirt) {
	for _, rt := range reg.Backends() {
		if vm, ok := registry.Ability[libvirt.Reconfigurer](rt); ok {
			vm.Reconfigure(liveLibvirt(l))
		}
	}
}

// liveContainerd hands containerd.call_timeout to the container
// runtimes of reg that were kept (a new one was dialled with it).
func liveContainerd(reg *registry.Registry, timeout time.Duration) {
	for _, rt := range reg.Backends() {
		if c, ok := registry.Ability[containerd.CallTimeouter](rt); ok {
			c.SetCallTimeout(timeout)
		}
	}
}

// liveLibvirt are the live keys of l (config.LiveKeys).
func liveLibvirt(l config.Libvirt) libvirt.Live {
	m := l.Migration
	return libvirt.Live{
		AgentCalls:        libvirt.AgentCaps{PerVM: l.AgentCallsPerVM, PerNode: l.AgentCallsPerNode},
		GuestBootTimeout:  l.GuestBootTimeout.Duration,
		MaxSnapshotsPerVM: l.MaxSnapshotsPerVM,
		GCInterval:        l.GCInterval.Duration,
		Templates: instant.Limits{MaxMaking: l.TemplateMaxMaking, MaxKept: l.TemplateMaxKept,
			RetryAfter: l.TemplateRetryAfter.Duration, CPUMillis: l.TemplateCPUMillis},
		Migration: migration.Tunables{BandwidthMiB: m.BandwidthMiB, CompletionTimeoutPerGiB: m.CompletionTimeoutPerGiB.Duration,
			ProgressTimeout: m.ProgressTimeout.Duration, TargetTimeout: m.TargetTimeout.Duration},
	}
}

// restartOnlyChanges names the keys that differ between cur, the config
// in force, and next but cannot change while crimux runs: the socket,
// the state dir, the metrics address, the log format and the node
// agent's settings; every libvirt key but the live ones while a VM
// runtime is kept (a reload that adds the VM runtime builds it with
// next's).
func restartOnlyChanges(cur, next config.Config) []string {
	var keys []string
	for _, k := range []struct {
		key       string
		cur, next string
	}{
		{"listen", cur.Listen, next.Listen},
		{"state_dir", cur.StateDir, next.StateDir},
		{"metrics_address", cur.MetricsAddress, next.MetricsAddress},
		{"log_format", cur.LogFormat, next.LogFormat},
		{"kubernetes.kubeconfig", cur.Kubernetes.Kubeconfig, next.Kubernetes.Kubeconfig},
		{"kubernetes.node_name", cur.Kubernetes.NodeName, next.Kubernetes.NodeName},
	} {
		if k.cur != k.next {
			keys = append(keys, k.key)
		}
	}
	if hasType(cur, config.TypeVM) && hasType(next, config.TypeVM) {
		for _, key := range config.Changed("libvirt", cur.Libvirt, next.Libvirt) {
			if !config.IsLive(key) {
				keys = append(keys, key)
			}
		}
	}
	return keys
}

func hasType(cfg config.Config, typ string) bool {
	for _, rt := range cfg.Runtimes {
		if rt.Type == typ {
			return true
		}
	}
	return false
}

// callTracker counts the unary calls in flight per registry generation, so
// a reload closes what it dropped only after the calls that may still use
// it are done. Streams are not counted: the long ones (container events)
// would hold a reload for their whole life.
type callTracker struct {
	mu sync.Mutex
	wg *sync.WaitGroup
}

func newCallTracker() *callTracker { return &callTracker{wg: new(sync.WaitGroup)} }

func (t *callTracker) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	t.mu.Lock()
	wg := t.wg
	wg.Add(1)
	t.mu.Unlock()
	defer wg.Done()
	return handler(ctx, req)
}

// rotate starts a new generation and returns the old one's calls. Called
// after the registry swap: a call counted in the new generation started
// after the swap and cannot see the old registry.
func (t *callTracker) rotate() *sync.WaitGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.wg
	t.wg = new(sync.WaitGroup)
	return old
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
