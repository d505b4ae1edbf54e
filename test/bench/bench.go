package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/ctd"
	"github.com/crimux/crimux/test/bench/daemon"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/machine"
	"github.com/crimux/crimux/test/bench/rawproxy"
	"github.com/crimux/crimux/test/bench/report"
	"github.com/crimux/crimux/test/bench/runs"
	"github.com/crimux/crimux/test/bench/stats"
)

// bench is one run: its crimux, the two paths and what it made.
type bench struct {
	opts    options
	runID   string
	dir     string // /var/lib/crimux-bench-<run>: crimux's state, logs, the direct VMs
	socket  string
	started time.Time
	crimux  *daemon.Daemon
	cri     *criclient.Endpoint // crimux
	ctd     *criclient.Endpoint // containerd, directly
	raw     *criclient.Endpoint // containerd through the raw forwarder
	rawFwd  interface {         // *rawproxy.Process, or *rawproxy.Proxy with -rawproxy-in-process
		Addr() string
	}
	own     *ctd.Containerd // the run's own containerd (-own-containerd), or nil
	direct  *libvirtdirect.Client
	res     *report.Results
	host    machine.Facts
	samples strings.Builder

	mu       sync.Mutex
	vmSeq    int
	seq      int
	vms      []*vmPod // every VM pod made through crimux and not yet removed
	burstVMs []*vmPod
	burst    burstResult       // every burst VM's times, both paths
	burstCPU map[string]string // where each burst path's CPU went (cpuuse.go)
	pods     []containerPodIDs // container pods kept running
	// the scale figures' pods (scale.go)
	stoppedVMs []*vmPod
	pausePods  []string
	// probes are the CPU probe's times before each phase (machine.Probe).
	probes              []time.Duration
	lastBusy, lastSteal time.Duration // the host's CPU times at the last probe
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %6.1fs: %s\n", time.Since(b.started).Seconds(), fmt.Sprintf(format, args...))
}

// samplesOfPaths is samplesOf for the measurements of more than two paths.
func (b *bench) samplesOfPaths(name string, s map[stats.Path]stats.Samples) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range []stats.Path{stats.Direct, stats.ViaCrimux, stats.RawProxy} {
		for _, t := range s[p] {
			fmt.Fprintf(&b.samples, "Benchmark%s/path=%s 1 %d ns/op\n", name, p, t.Nanoseconds())
		}
	}
}

// samplesOf records every sample of a measurement, in the Go benchmark
// format with the path as a name key (benchstat -col /path).
func (b *bench) samplesOf(name string, d, c stats.Samples) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, side := range []struct {
		p stats.Path
		s stats.Samples
	}{{stats.Direct, d}, {stats.ViaCrimux, c}} {
		for _, t := range side.s {
			fmt.Fprintf(&b.samples, "Benchmark%s/path=%s 1 %d ns/op\n", name, side.p, t.Nanoseconds())
		}
	}
}

// setUp checks the bed, starts crimux and pulls the images. On error the
// returned bench (if any) still needs cleanup.
func setUp(ctx context.Context, o options) (*bench, error) {
	b := &bench{opts: o, started: time.Now(), res: report.NewResults()}
	b.host = machine.Gather(o.crimuxBin)
	if err := checkBed(o); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(runs.DirPrefix), filepath.Base(runs.DirPrefix))
	if err != nil {
		return nil, err
	}
	b.dir, b.runID = dir, strings.TrimPrefix(dir, runs.DirPrefix)
	// qemu runs as libvirt-qemu and must traverse it to the VMs' files.
	if err := os.Chmod(dir, 0o711); err != nil {
		return b, err
	}
	if err := b.sweep(ctx); err != nil {
		b.logf("sweeping earlier runs' leftovers: %v", err)
	}
	if o.ownContainerd {
		if err := b.startContainerd(ctx); err != nil {
			return b, err
		}
		o = b.opts
	}
	if b.ctd, err = criclient.Dial("containerd", o.containerd); err != nil {
		return b, err
	}
	if err := b.startCrimux(o); err != nil {
		return b, err
	}
	if err := b.startRawProxy(); err != nil {
		return b, err
	}
	if err := b.waitVMRuntime(ctx); err != nil {
		return b, err
	}
	b.host.Versions(ctx, b.ctd.RT)
	b.measureIdleRSS()
	for _, img := range []string{busyboxImage, vmImage} {
		if err := criclient.Pull(ctx, b.cri, img); err != nil {
			return b, err
		}
	}
	if b.direct, err = libvirtdirect.New(ctx, o.containerd, vmImage, filepath.Join(dir, "direct"), b.runID); err != nil {
		return b, err
	}
	if o.vmNetwork == config.NetworkCNI {
		b.direct.AddNIC() // crimux's VM pods have one
	}
	return b, b.direct.PlaceIn(cgroups.Direct)
}

// startCrimux installs the qemu wrapper (if any), starts the run's crimux
// on a socket of its own and connects to it.
func (b *bench) startCrimux(o options) error {
	wrapper := ""
	if o.wrapper != "" {
		if err := daemon.InstallWrapper(o.wrapper); err != nil {
			return err
		}
		// Made here, not by crimux: crimux's placement server can make it
		// while crimux's listen has the process umask at 0117 (a race seen
		// here), and qemu's user cannot reach a socket in a 0640 directory.
		if err := os.MkdirAll(filepath.Dir(daemon.PlacementSocket), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Dir(daemon.PlacementSocket), 0o755); err != nil {
			return err
		}
		wrapper = daemon.Wrapper
	}
	b.socket = filepath.Join("/run/crimux-testbed", "bench-"+b.runID+".sock")
	var err error
	if b.crimux, err = daemon.New(o.crimuxBin, b.dir, b.socket, o.containerd, wrapper, o.vmNetwork, o.agentCapSettings()...); err != nil {
		return err
	}
	b.logf("run %s: crimux %s, state %s, socket %s, VM pod network %q", b.runID, o.crimuxBin, b.dir, b.socket, o.vmNetwork)
	if err := b.crimux.Start(); err != nil {
		return err
	}
	if err := b.crimux.WaitSocket(30 * time.Second); err != nil {
		return err
	}
	b.cri, err = criclient.Dial("crimux", "unix://"+b.socket)
	return err
}

// measureIdleRSS records crimux's memory once it has idled a second:
// nothing asked of it but readiness.
func (b *bench) measureIdleRSS() {
	time.Sleep(time.Second)
	if rss, err := b.crimux.RSSMiB(); err == nil {
		b.res.Set("rss_idle_mib", rss, "", "")
		b.res.Note("rss_idle_mib", "started, both runtimes ready, no pods, before any pull")
		b.logf("crimux RSS idle: %.1f MiB", rss)
	}
}

// startRawProxy starts the raw forwarder in front of containerd, in a
// process of its own (the bench run as -serve-rawproxy) unless
// -rawproxy-in-process, on a socket of the run's own.
func (b *bench) startRawProxy() error {
	socket := filepath.Join("/run/crimux-testbed", "bench-"+b.runID+"-rawproxy.sock")
	var err error
	if b.opts.rawProxyInProcess {
		b.rawFwd, err = rawproxy.Start(socket, b.opts.containerd)
	} else {
		var self string
		if self, err = os.Executable(); err == nil {
			b.rawFwd, err = rawproxy.StartProcess(self, socket, b.opts.containerd)
		}
	}
	if err != nil {
		return err
	}
	b.raw, err = criclient.Dial("rawproxy", b.rawFwd.Addr())
	return err
}

// rawProxyCPU is the CPU time the raw forwarder's process has used (0 in
// the bench's process).
func (b *bench) rawProxyCPU() time.Duration {
	if p, ok := b.rawFwd.(*rawproxy.Process); ok {
		return daemon.ProcessCPUTime(p.Pid())
	}
	return 0
}

// checkBed fails unless containerd, libvirtd and the registry's images
// are there (make bed).
func checkBed(o options) error {
	sock := strings.TrimPrefix(o.containerd, "unix://")
	if _, err := os.Stat(sock); err != nil {
		return fmt.Errorf("containerd socket %s: %w (run make bed)", sock, err)
	}
	if _, err := os.Stat(libvirtdirect.Socket); err != nil {
		return fmt.Errorf("libvirtd socket %s: %w (run make bed)", libvirtdirect.Socket, err)
	}
	if _, err := os.Stat(o.crimuxBin); err != nil {
		return fmt.Errorf("crimux binary: %w (run make build)", err)
	}
	return nil
}

// waitVMRuntime waits until crimux reports its VM runtime ready (it
// connects to libvirtd after it listens).
func (b *bench) waitVMRuntime(ctx context.Context) error { return waitVMRuntimeOn(ctx, b.cri) }

// waitVMRuntimeOn is waitVMRuntime of the crimux at e.
func waitVMRuntimeOn(ctx context.Context, e *criclient.Endpoint) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return waitUntil(ctx, 50*time.Millisecond, func() error {
		st, err := e.RT.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return err
		}
		for _, c := range st.GetStatus().GetConditions() {
			if c.GetType() == "VMRuntimeReady" {
				if c.GetStatus() {
					return nil
				}
				return fmt.Errorf("VMRuntimeReady is false: %s %s", c.GetReason(), c.GetMessage())
			}
		}
		return errors.New("no VMRuntimeReady condition")
	})
}

// waitUntil polls f every interval until it returns nil or ctx ends.
func waitUntil(ctx context.Context, interval time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
