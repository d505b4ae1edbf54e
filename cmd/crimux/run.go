package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/metrics"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
	"github.com/crimux/crimux/runtimes/libvirt"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/vmapi"
	"github.com/crimux/crimux/vmtypes"
)

// maxMsgSize matches kubelet's client limit.
const maxMsgSize = 16 << 20

// shutdownGrace bounds how long in-flight calls may finish on SIGTERM.
const shutdownGrace = 10 * time.Second

func run(args []string) int {
	f, fs, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	cfg, err := loadConfig(f, fs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crimux: invalid config: %v\n", err)
		return 2
	}
	d := newDaemon(cfg, f, fs, os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Caught from the start: SIGHUP's default action would kill crimux.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := d.serve(ctx, hup); err != nil {
		d.log.Error("crimux stopped", "err", err)
		return 1
	}
	return 0
}

// daemon is one running crimux: its config, the parts it wires together,
// and what a reload swaps.
type daemon struct {
	// flags and fs are kept so a reload applies the same flags over the
	// re-read config file.
	flags flags
	fs    *flag.FlagSet
	log   *slog.Logger
	level *slog.LevelVar
	// newFactories makes the runtime factories of a config (tests replace it).
	newFactories func(config.Config, *slog.Logger) map[string]registry.Factory

	// cfg is the config in force; only the serve loop (reloads included)
	// reads or writes it.
	cfg config.Config

	cri *cri.Server
	// vm is the VM API: served on the socket, and called in-process by the
	// node agent.
	vm      *vmapi.Server
	metrics *metrics.Metrics
	calls   *callTracker
	notify  notifier
	health  *healthState
	// guestBoots hands the VM runtime's guest-boot reports to the node
	// agent while one runs.
	guestBoots *guestBootRelay
	// reloads writes each reload's outcome for crimux reload.
	reloads reloadStatus
}

func newDaemon(cfg config.Config, f flags, fs *flag.FlagSet, logTo io.Writer) *daemon {
	level := new(slog.LevelVar)
	level.Set(parseLevel(cfg.LogLevel))
	log := slog.New(logHandler(cfg.LogFormat, logTo, &slog.HandlerOptions{Level: level}))
	d := &daemon{
		flags: f, fs: fs, log: log, level: level, cfg: cfg,
		calls: newCallTracker(), notify: notifier{log: log}, health: &healthState{}, guestBoots: &guestBootRelay{},
		reloads: reloadStatus{dir: DefaultReloadStatusDir},
	}
	d.metrics = metrics.New(metrics.Options{Version: version.Version, VMPowerStates: d.vmPowerStates, VMSamples: d.vmSamples,
		VMNode: d.vmNode})
	d.newFactories = d.factories
	return d
}

func parseLevel(level string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return l
}

// factories are the runtime implementations of this build, by workload
// type, counting into the daemon's metrics.
func (d *daemon) factories(cfg config.Config, log *slog.Logger) map[string]registry.Factory {
	return map[string]registry.Factory{
		config.TypeContainer: containerd.Factory{Defaults: cfg.Containerd, StateDir: cfg.StateDir, Counters: d.metrics, Log: log},
		config.TypeVM: libvirt.Factory{
			Options: libvirt.Options{
				StateDir: cfg.StateDir, URI: cfg.Libvirt.URI, Accel: cfg.Libvirt.Accel,
				Emulator:          cfg.Libvirt.Emulator, // Instance: the state dir's identity (internal/identity)
				MemoryOverheadMiB: cfg.Libvirt.MemoryOverheadMiB, StreamingAddr: cfg.Libvirt.StreamingAddr,
				MaxVCPUs: cfg.Libvirt.MaxVCPUs, MaxMemoryMiB: cfg.Libvirt.MaxMemoryMiB,
				MaxDiskVirtualSize: cfg.Libvirt.MaxDiskVirtualSizeGiB << 30,
				AgentCalls:         libvirt.AgentCaps{PerVM: cfg.Libvirt.AgentCallsPerVM, PerNode: cfg.Libvirt.AgentCallsPerNode},
				MaxSnapshotsPerVM:  cfg.Libvirt.MaxSnapshotsPerVM,
				PlacementSocket:    cfg.Libvirt.PlacementSocket, Network: vmNetwork(cfg),
				Identities:       libvirt.IdentityRange{Base: cfg.Libvirt.VMIDBase, Count: cfg.Libvirt.VMIDCount},
				Counters:         d.metrics,
				GuestBootTimeout: cfg.Libvirt.GuestBootTimeout.Duration, OnGuestBoot: d.guestBoots.report,
				GCInterval:   cfg.Libvirt.GCInterval.Duration,
				TemplatesOff: !cfg.Libvirt.Templates, TemplateParent: cfg.Libvirt.TemplateCgroupParent,
				TemplateLimits: libvirt.TemplateLimits{ShareAcrossNamespaces: cfg.Libvirt.TemplateShareAcrossNamespaces,
					MaxMaking: cfg.Libvirt.TemplateMaxMaking, MaxKept: cfg.Libvirt.TemplateMaxKept,
					RetryAfter: cfg.Libvirt.TemplateRetryAfter.Duration, CPUMillis: cfg.Libvirt.TemplateCPUMillis},
				Migration: vmMigration(cfg.Libvirt.Migration),
			},
			ContainerdEndpoint: cfg.Containerd.Endpoint,
			Log:                log,
		},
	}
}

// vmMigration is the node's live migration endpoint; nil unless set.
func vmMigration(m config.Migration) *migration.Config {
	if !m.Enabled() {
		return nil
	}
	return &migration.Config{Address: m.Address, LibvirtURI: m.LibvirtURI, PKIDir: m.PKIDir, BandwidthMiB: m.BandwidthMiB,
		CompletionTimeoutPerGiB: m.CompletionTimeoutPerGiB.Duration, MaxOutgoing: m.MaxOutgoing,
		TargetTimeout: m.TargetTimeout.Duration, ProgressTimeout: m.ProgressTimeout.Duration}
}

// vmNetwork is the VM pods' CNI setup; nil with network = "none".
func vmNetwork(cfg config.Config) *podnet.Config {
	if cfg.Libvirt.Network != config.NetworkCNI {
		return nil
	}
	return &podnet.Config{
		ConfDir: cfg.Libvirt.CNIConfDir, BinDirs: cfg.Libvirt.CNIBinDirs, NetnsDir: cfg.Libvirt.NetnsDir,
		CacheDir: filepath.Join(cfg.StateDir, "cni"),
	}
}

// services are the gRPC services served on crimux's socket, each
// registering itself on the one grpc.Server (so every one gets the same
// interceptors: request IDs, logging, error codes, metrics). A new API
// adds its line here.
func (d *daemon) services() []func(*grpc.Server) {
	return []func(*grpc.Server){
		d.cri.Register, // CRI v1: RuntimeService, ImageService
		d.vm.Register,  // crimux.vm.v1.VMService
	}
}

// recoveryWait bounds how long READY waits for the VM runtime's recovery:
// with libvirtd down, containers must not wait for it (the VM runtime
// recovers in the background when libvirtd is back).
const recoveryWait = 30 * time.Second

// recoverRuntimes waits, once crimux listens and before it tells systemd
// it is ready, until every VM runtime has recovered: store and libvirt
// reconciled, the first collector pass done (teardowns finished, this
// crimux's orphans adopted): every backend with the Recoverer ability.
func (d *daemon) recoverRuntimes(ctx context.Context, reg *registry.Registry) {
	deadline := time.NewTimer(recoveryWait)
	defer deadline.Stop()
	for _, rt := range reg.Backends() {
		vm, ok := registry.Ability[registry.Recoverer](rt)
		if !ok {
			continue
		}
		start := time.Now()
		select {
		case <-vm.Recovered():
			d.log.Info("runtime recovered", "runtime", rt.Name, "took", time.Since(start).Round(time.Millisecond))
		case <-deadline.C:
			d.log.Warn("runtime not recovered yet (libvirtd unreachable?); ready for the others, it recovers once libvirtd answers",
				"runtime", rt.Name, "waited", recoveryWait)
			return
		case <-ctx.Done():
			return
		}
	}
}

// serve builds the runtimes, listens, tells systemd it is ready and serves
// until ctx ends (SIGTERM, SIGINT), reloading the config on every hup
// (SIGHUP).
func (d *daemon) serve(ctx context.Context, hup <-chan os.Signal) error {
	if err := os.MkdirAll(d.cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	reg, err := registry.New(ctx, d.cfg, d.newFactories(d.cfg, d.log))
	if err != nil {
		return err
	}
	d.cri = cri.New(reg, d.log)
	d.cri.ReserveIDs(vmIdentities(d.cfg))
	d.vm = vmapi.New(d.cri.Registry, d.log)
	defer func() { d.cri.Registry().Close() }()
	defer d.reloads.remove()
	lis, err := listen(d.cfg.Listen)
	if err != nil {
		return err
	}
	g := d.grpcServer()
	for _, register := range d.services() {
		register(g)
	}
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	d.serveMetrics(ctx)
	servePprof(ctx, d.log)
	d.recoverRuntimes(ctx, reg)
	stopAgent := d.startNodeAgent(ctx)
	defer stopAgent() // before the registry closes: the agent calls the VM runtime
	d.log.Info("crimux serving", "version", version.Version, "listen", d.cfg.Listen, "runtimes", runtimeNames(reg))
	d.notify.send("READY=1\nSTATUS=serving on " + d.cfg.Listen)
	go d.healthLoop(ctx, d.cfg.Listen)

	for {
		select {
		case err := <-errc:
			return err
		case <-hup:
			d.reload(ctx)
		case <-ctx.Done():
			d.log.Info("shutting down")
			d.notify.send("STOPPING=1")
			gracefulStop(g)
			return nil
		}
	}
}

// grpcServer is the server of every service on the socket. Interceptors,
// outermost first: drain tracking for reloads, metrics (outside the error
// translation, so they see the codes clients see), then cri's request IDs,
// logging and error translation.
//
// Calls run on a few long-lived stream workers instead of a new goroutine
// each: a proxied call (handler, interceptors, the client call to
// containerd) needs a larger stack than a new goroutine starts with, and
// growing it by copying, two or three times per call, was ~10 % of
// crimux's CPU per ContainerStatus (docs/benchmarks.md). A worker keeps
// its grown stack; when all are busy gRPC starts a goroutine as before.
func (d *daemon) grpcServer() *grpc.Server {
	return grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.NumStreamWorkers(streamWorkers()),
		// Answers passed through as bytes are sent without a copy.
		grpc.ForceServerCodecV2(cri.ServerCodec{}),
		grpc.ChainUnaryInterceptor(d.calls.unary, d.metrics.UnaryServerInterceptor(), cri.UnaryInterceptor(d.log, nil)),
		grpc.ChainStreamInterceptor(d.metrics.StreamServerInterceptor(), cri.StreamInterceptor(d.log, nil)),
	)
}

// streamWorkers is one worker per CPU (gRPC's suggestion), at least four
// so that a slow call does not leave the others to new goroutines.
func streamWorkers() uint32 {
	return uint32(max(4, runtime.NumCPU()))
}

// serveMetrics starts the metrics endpoint if one is configured. A port
// that cannot be had is logged, not fatal: CRI matters more than metrics.
func (d *daemon) serveMetrics(ctx context.Context) {
	if d.cfg.MetricsAddress == "" {
		return
	}
	addr, err := d.metrics.Serve(ctx, d.cfg.MetricsAddress, d.log)
	if err != nil {
		d.log.Error("metrics not served", "metrics_address", d.cfg.MetricsAddress, "err", err)
		return
	}
	d.log.Info("metrics serving", "address", addr.String(), "path", "/metrics")
}

// vmPowerStates counts the VMs of the runtimes in force that count them
// (the PowerStateCounter ability), for metrics.
func (d *daemon) vmPowerStates() (map[string]int, error) {
	if d.cri == nil {
		return nil, nil
	}
	counts := map[string]int{}
	for _, rt := range d.cri.Registry().Backends() {
		if vm, ok := registry.Ability[registry.PowerStateCounter](rt); ok {
			c, err := vm.PowerStateCounts()
			if err != nil {
				return nil, err
			}
			for state, n := range c {
				counts[state] += n
			}
		}
	}
	return counts, nil
}

// vmSamples are every VM runtime's VMs' figures (crimux_vm_*).
func (d *daemon) vmSamples() ([]vmtypes.VMSample, error) {
	if d.cri == nil {
		return nil, nil
	}
	var all []vmtypes.VMSample
	for _, rt := range d.cri.Registry().Backends() {
		if s, ok := registry.Ability[vmtypes.Sampler](rt); ok {
			samples, err := s.VMSamples()
			if err != nil {
				return nil, err
			}
			all = append(all, samples...)
		}
	}
	return all, nil
}

// listen creates the unix socket 0660, replacing a stale one.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen: remove stale socket: %w", err)
	}
	// chmod after listen, not umask around it: the umask is process-wide
	// and would also apply to files other goroutines create meanwhile.
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return lis, nil
}

func gracefulStop(g *grpc.Server) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		g.Stop() // long streams (events) do not hold shutdown
	}
}

func runtimeNames(reg *registry.Registry) []string {
	var names []string
	for _, rt := range reg.Runtimes() {
		names = append(names, rt.Name)
	}
	return names
}

// vmIdentities is the range of uids and gids the VM runtime gives VMs'
// qemu (none when every qemu runs as qemu.conf's user): the CRI server
// refuses them to pods and containers.
func vmIdentities(cfg config.Config) cri.IDRange {
	if cfg.Libvirt.VMIDCount == 0 {
		return cri.IDRange{}
	}
	return cri.IDRange{First: cfg.Libvirt.VMIDBase, End: uint32(min(uint64(cfg.Libvirt.VMIDBase)+uint64(cfg.Libvirt.VMIDCount), 1<<32-1))}
}

// logHandler is the log's handler for format (text or json, validated).
func logHandler(format string, w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}
