package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	wrapper := ""
	if o.wrapper != "" {
		if err := daemon.InstallWrapper(o.wrapper); err != nil {
			return b, err
		}
		// Made here, not by crimux: crimux's placement server can make it
		// while crimux's listen has the process umask at 0117 (a race seen
		// here), and qemu's user cannot reach a socket in a 0640 directory.
		if err := os.MkdirAll(filepath.Dir(daemon.PlacementSocket), 0o755); err != nil {
			return b, err
		}
		if err := os.Chmod(filepath.Dir(daemon.PlacementSocket), 0o755); err != nil {
			return b, err
		}
		wrapper = daemon.Wrapper
	}
	b.socket = filepath.Join("/run/crimux-testbed", "bench-"+b.runID+".sock")
	if b.crimux, err = daemon.New(o.crimuxBin, dir, b.socket, o.containerd, wrapper, o.vmNetwork, o.agentCapSettings()...); err != nil {
		return b, err
	}
	b.logf("run %s: crimux %s, state %s, socket %s, VM pod network %q", b.runID, o.crimuxBin, dir, b.socket, o.vmNetwork)
	if err := b.crimux.Start(); err != nil {
		return b, err
	}
	if err := b.crimux.WaitSocket(30 * time.Second); err != nil {
		return b, err
	}
	if b.cri, err = criclient.Dial("crimux", "unix://"+b.socket); err != nil {
		return b, err
	}
	if err := b.startRawProxy(); err != nil {
		return b, err
	}
	if err := b.waitVMRuntime(ctx); err != nil {
		return b, err
	}
	b.host.Versions(ctx, b.ctd.RT)
	time.Sleep(time.Second) // idle: nothing asked of it but readiness
	if rss, err := b.crimux.RSSMiB(); err == nil {
		b.res.Set("rss_idle_mib", rss, "", "")
		b.res.Note("rss_idle_mib", "started, both runtimes ready, no pods, before any pull")
		b.logf("crimux RSS idle: %.1f MiB", rss)
	}
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

// cleanup removes everything the run made; it logs what it cannot.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	warn := func(what string, err error) {
		if err != nil {
			b.logf("cleanup: %s: %v", what, err)
		}
	}
	if b.crimux != nil && b.cri != nil {
		// The running guests paused first: they would load the cores the
		// removals need.
		warn("pausing the guests", b.setGuestsPaused(ctx, true))
	}
	// The VM pods (crimux, libvirtd) and the container pods (containerd)
	// are removed side by side: neither waits on the other's daemon.
	var wg sync.WaitGroup
	if b.crimux != nil && b.cri != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			b.mu.Lock()
			vms := append([]*vmPod(nil), b.vms...)
			b.mu.Unlock()
			warn("VM pods", criclient.Parallel(len(vms), b.opts.workers, func(i int) error { return b.removeVM(ctx, vms[i]) }))
			b.logf("cleanup: %d VM pods removed in %s", len(vms), time.Since(t0).Round(100*time.Millisecond))
		}()
	}
	if b.ctd != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remove, what := b.removeLabelledPods, "container pods"
			if b.own != nil {
				remove, what = b.removeNetworkPods, "container pods on the pod network"
			}
			t0 := time.Now()
			n, err := remove(ctx)
			if err != nil {
				warn(what+" (trying again)", err)
				_, err = remove(ctx)
				warn(what, err)
			}
			b.logf("cleanup: %d %s removed in %s", n, what, time.Since(t0).Round(100*time.Millisecond))
		}()
	}
	wg.Wait()
	if b.direct != nil {
		warn("direct VMs", b.direct.RemoveAll())
	}
	if b.crimux != nil {
		b.crimux.Stop()
		_ = os.Remove(filepath.Dir(daemon.PlacementSocket)) // if no other run uses it
		if err := libvirtdirect.RemoveDomainsOf(daemon.InstanceOf(b.dir)); err != nil {
			// libvirtd away (restarted by a test?): give it a minute.
			warn("leftover domains (waiting for libvirtd)", err)
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			warn("leftover domains (the next run's sweep removes them)",
				waitUntil(wctx, time.Second, func() error { return libvirtdirect.RemoveDomainsOf(daemon.InstanceOf(b.dir)) }))
			cancel()
		}
		b.keepLog()
	}
	if b.own != nil {
		warn("the run's containerd", b.killContainerd())
	}
	warn("cgroups", cgroups.RemoveRun(b.runID))
	if out, err := exec.Command("ip", "link", "del", daemon.Bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find") {
		warn("the VM pods' bridge", fmt.Errorf("%v: %s", err, out))
	}
	if b.direct != nil {
		b.direct.Close()
	}
	if b.dir != "" {
		warn("state dir", os.RemoveAll(b.dir))
	}
	for _, e := range []*criclient.Endpoint{b.cri, b.ctd, b.raw} {
		if e != nil {
			e.Close()
		}
	}
	switch p := b.rawFwd.(type) {
	case *rawproxy.Process:
		p.Stop()
	case *rawproxy.Proxy:
		p.Close()
	}
	if b.socket != "" {
		_ = os.Remove(b.socket)
	}
	b.logf("cleanup took %s", time.Since(start).Round(100*time.Millisecond))
}

// removeLabelledPods removes every pod of this run containerd still has
// (the container pods; crimux's IDs for them are containerd's).
func (b *bench) removeLabelledPods(ctx context.Context) (int, error) {
	resp, err := b.ctd.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: b.labels()},
	})
	if err != nil {
		return 0, err
	}
	items := resp.GetItems()
	return len(items), criclient.Parallel(len(items), b.opts.workers, func(i int) error { return criclient.RemovePod(ctx, b.ctd, items[i].GetId()) })
}

// keepLog copies crimux's log of the run out of the state dir.
func (b *bench) keepLog() {
	if b.opts.logDir == "" {
		return
	}
	data, err := os.ReadFile(b.crimux.LogPath)
	if err != nil {
		return
	}
	if os.MkdirAll(b.opts.logDir, 0o755) == nil {
		_ = os.WriteFile(filepath.Join(b.opts.logDir, "crimux.log"), data, 0o644)
	}
}

// finish writes the samples and the Markdown table.
func (b *bench) finish() {
	b.host.LoadEnd = machine.ReadLoad()
	b.host.Took = time.Since(b.started)
	if b.opts.samples != "" {
		if err := os.MkdirAll(filepath.Dir(b.opts.samples), 0o755); err == nil {
			if err := os.WriteFile(b.opts.samples, []byte(b.samples.String()), 0o644); err != nil {
				b.logf("samples: %v", err)
			}
		}
	}
	if b.opts.out != "" {
		if err := report.WriteDoc(b.opts.out, b.res, b.host, b.opts.counts()); err != nil {
			b.logf("%s: %v", b.opts.out, err)
		} else {
			b.logf("wrote %s", b.opts.out)
		}
	}
	b.logf("done in %s", b.host.Took.Round(time.Second))
}
