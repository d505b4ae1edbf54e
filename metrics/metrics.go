// Package metrics owns crimux's Prometheus metrics and the HTTP endpoint
// that serves them (config metrics_address, off by default):
//
//	crimux_rpc_duration_seconds{api,rpc,runtime}     latency of every CRI and VM API call (histogram)
//	crimux_rpc_errors_total{api,rpc,runtime,code}    failed calls by gRPC code
//	crimux_vms{power_state}                          VMs by power state, read from the VM runtime at scrape time
//	crimux_vm_*{namespace,pod,container}             each VM's power state, CPU, memory, disk and network I/O,
//	                                                 read at scrape time: a VM's series go with it (vmsamples.go)
//	crimux_agent_calls_{in_flight,waiting,cap},      the VM runtime's node-wide bounds: guest-agent call slots and
//	crimux_templates{state}, crimux_template_bytes,  caps, templates, image cache, guests stuck booting; read at
//	crimux_image_cache_*, crimux_guest_boots_stuck   scrape time from its own state (vmnode.go)
//	crimux_runtime_ready{runtime,type}               1 when the runtime's last health check found it ready
//	crimux_reconnects_total{target}                  connections to libvirtd or containerd re-made after a loss
//	crimux_gc_removals_total{kind}                   what garbage collection removed
//	crimux_migration*                                live migrations: ended, their duration and downtime, and
//	                                                 the progress of VMs leaving now (migrations.go)
//	crimux_agent_calls_refused_total{cap,reason},    the VM runtime's events as they happen: agent calls refused
//	crimux_agent_call_wait_seconds,                  at the caps and their wait for a slot, VMs restored from
//	crimux_template_clones_total{result},            their template or booted, template makings ended, guests
//	crimux_template_makings_total{result},           seen booted, late or stuck (vmevents.go)
//	crimux_guest_boots_total{result}
//	crimux_config_reloads_total{result}              SIGHUP reloads, "success" or "failure"
//	crimux_build_info{version}                       always 1
//
// plus Go's and the process's own. api is "cri" or "vm" (crimux's VM API);
// runtime is the registry entry a call was routed to, as the handler that
// routed it recorded it in the call's context (internal/route): "all" for
// calls that fan out (lists, Status, Version) and "none" when routing
// failed. The package knows nothing of the registry.
//
// The runtimes count reconnects, garbage collection, migrations and the VM
// runtime's events through *Metrics, handed to them by the daemon
// (GCRemoved, Reconnected, MigrationEnded, AgentCallRefused, ...).
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crimux/crimux/vmtypes"
)

const namespace = "crimux"

// latencyBuckets span a cached Status (sub-millisecond) to a slow image
// pull or VM start (minutes).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Options are what the metrics read from the rest of crimux.
type Options struct {
	// Version is crimux's version, for crimux_build_info.
	Version string
	// VMPowerStates counts the VMs by power state; nil when no VM runtime
	// is configured. Called at every scrape.
	VMPowerStates func() (map[string]int, error)
	// VMSamples are each VM's figures (crimux_vm_*); nil when no VM
	// runtime is configured. Called at every scrape.
	VMSamples func() ([]vmtypes.VMSample, error)
	// VMNode is the VM runtime's node-wide state (vmnode.go); nil, or
	// a nil sample, when no VM runtime is configured. Called at every
	// scrape.
	VMNode func(ctx context.Context) (*vmtypes.NodeSample, error)
}

// Metrics is one registry of crimux's metrics.
type Metrics struct {
	reg          *prometheus.Registry
	rpcDuration  *prometheus.HistogramVec
	durations    sync.Map // durationKey -> prometheus.Observer: rpcDuration's histograms in use
	rpcErrors    *prometheus.CounterVec
	runtimeReady *prometheus.GaugeVec
	reloads      *prometheus.CounterVec
	counters
	migrations
	vmEvents

	mu         sync.Mutex
	readyNames map[[2]string]bool // label sets of runtimeReady in use
}

// New registers every metric in a registry of its own.
func New(opts Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "rpc_duration_seconds",
			Help:    "Latency of CRI and VM API calls served by crimux, by API, RPC and the runtime the call was routed to.",
			Buckets: latencyBuckets,
		}, []string{"api", "rpc", "runtime"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rpc_errors_total",
			Help: "CRI and VM API calls that failed, by API, RPC, runtime and gRPC code.",
		}, []string{"api", "rpc", "runtime", "code"}),
		runtimeReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "runtime_ready",
			Help: "1 if the runtime answered its last health check ready, else 0.",
		}, []string{"runtime", "type"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "config_reloads_total",
			Help: "Config reloads (SIGHUP) by result: success, or failure (the old config stays).",
		}, []string{"result"}),
		counters:   newCounters(),
		migrations: newMigrations(),
		vmEvents:   newVMEvents(),
		readyNames: map[[2]string]bool{},
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info", Help: "crimux's version; always 1.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(m.rpcDuration, m.rpcErrors, m.runtimeReady, m.reloads, buildInfo,
		m.reconnects, m.gcRemovals, newVMCollector(opts.VMPowerStates),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.migrations.collectors()...)
	m.reg.MustRegister(m.vmEvents.collectors()...)
	if opts.VMSamples != nil {
		m.reg.MustRegister(&vmSampleCollector{samples: opts.VMSamples})
	}
	if opts.VMNode != nil {
		m.reg.MustRegister(&vmNodeCollector{sample: opts.VMNode})
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// Registry is the Prometheus registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format. A collector
// that fails (the VM runtime unreachable) leaves the others served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// RuntimeReadiness is one runtime's health as the health loop found it.
type RuntimeReadiness struct {
	Runtime, Type string
	Ready         bool
}

// SetRuntimeReady records one round of health checks; runtimes no longer
// configured (a reload removed them) stop being exported.
func (m *Metrics) SetRuntimeReady(all []RuntimeReadiness) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[[2]string]bool{}
	for _, r := range all {
		key := [2]string{r.Runtime, r.Type}
		seen[key] = true
		v := 0.0
		if r.Ready {
			v = 1
		}
		m.runtimeReady.WithLabelValues(r.Runtime, r.Type).Set(v)
	}
	for key := range m.readyNames {
		if !seen[key] {
			m.runtimeReady.DeleteLabelValues(key[0], key[1])
		}
	}
	m.readyNames = seen
}

// ObserveReload counts one config reload.
func (m *Metrics) ObserveReload(err error) {
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		return
	}
	m.reloads.WithLabelValues("success").Inc()
}

// Serve serves /metrics on addr until ctx ends. It returns once the
// listener is open, with the address it listens on (addr may name port 0).
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return lis.Addr(), nil
}
