package main

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/registry"
)

// maxDrain bounds how long a reload waits for the calls in flight on the
// old registry before closing the runtimes the new config dropped.
const maxDrain = 5 * time.Minute

// reload re-reads the config on SIGHUP, with the same flags over it, and
// swaps in a registry built from it: runtimes can be added and removed
// without a restart, and the backends of unchanged runtimes are taken over
// as they are (registry.Rebuild), so running pods are not disturbed. An
// invalid config, or runtimes that cannot be built, leave the old config in
// force, and the log says why.
func (d *daemon) reload(ctx context.Context) {
	d.notify.send(reloading())
	err := d.applyConfig(ctx)
	d.metrics.ObserveReload(err)
	if err != nil {
		d.log.Error("config reload failed; the old config stays in force", "config", d.flags.configPath, "err", err)
	}
	d.notify.send("READY=1")
}

func (d *daemon) applyConfig(ctx context.Context) error {
	cfg, err := loadConfig(d.flags, d.fs)
	if err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	ignored := keepRestartOnly(d.cfg, &cfg)
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
	d.level.Set(parseLevel(cfg.LogLevel))
	d.cfg = cfg
	d.log.Info("config reloaded", "config", d.flags.configPath, "runtimes", runtimeNames(reg))
	if len(ignored) > 0 {
		d.log.Warn("config reload: settings ignored until crimux restarts", "keys", ignored)
	}
	return nil
}

// keepRestartOnly resets in next the settings that cannot change while
// crimux runs to their values in force, and names the ones that differed:
// the socket, the state dir, the metrics address, the log format and the node agent's
// settings (the agent is not restarted by a reload); the libvirt and
// containerd connection settings too where the runtime using them is kept
// (they apply to runtimes the reload creates).
func keepRestartOnly(cur config.Config, next *config.Config) []string {
	var ignored []string
	keep := func(key string, dst *string, v string) {
		if *dst != v {
			ignored = append(ignored, key)
			*dst = v
		}
	}
	keep("listen", &next.Listen, cur.Listen)
	keep("state_dir", &next.StateDir, cur.StateDir)
	keep("metrics_address", &next.MetricsAddress, cur.MetricsAddress)
	keep("log_format", &next.LogFormat, cur.LogFormat)
	keep("kubernetes.kubeconfig", &next.Kubernetes.Kubeconfig, cur.Kubernetes.Kubeconfig)
	keep("kubernetes.node_name", &next.Kubernetes.NodeName, cur.Kubernetes.NodeName)
	if !reflect.DeepEqual(next.Libvirt, cur.Libvirt) && hasType(cur, config.TypeVM) && hasType(*next, config.TypeVM) {
		ignored = append(ignored, "libvirt (the VM runtime is kept)")
	}
	if next.Containerd.CallTimeout != cur.Containerd.CallTimeout && hasType(cur, config.TypeContainer) {
		ignored = append(ignored, "containerd.call_timeout (for connections kept)")
	}
	return ignored
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
