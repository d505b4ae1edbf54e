package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/libvirtdirect"
	"github.com/crimux/crimux/test/bench/report"
	"github.com/crimux/crimux/test/bench/stats"
)

// The burst: n VMs started at once through libvirt directly, removed,
// then the same n through crimux (kept for the recovery figures), each
// timed until it runs and until its guest prints the boot marker.

// burstMarkerTimeout bounds the wait for the guests' markers: 50 guests
// booting under TCG on 2 cores take minutes.
const burstMarkerTimeout = 5 * time.Minute

// burstPoll is how often the burst reads a console log for the marker,
// on both paths. The single-VM phases read every 5 ms; 50 guests' logs
// read that often, whole, were up to 10,000 reads a second by the bench
// itself on 2 cores the booting guests already saturate. 0.1 s is a
// resolution of under 0.5 % of the marker's p50.
const burstPoll = 100 * time.Millisecond

// Each guest is paused once its marker is seen, on both paths (through
// crimux's VM API, directly through libvirt), outside the timing. Under
// TCG an idle guest still costs the host about 4 % of a core (its timers
// are emulated; under KVM it costs next to nothing): 25 guests booted
// would take a core from the 25 still booting, and the marker's p50 would
// measure TCG's idle cost rather than the boots.

// markerWait waits for the markers of a burst's guests until half of them
// have printed theirs, which is all the marker's p50 needs: the other
// half would add minutes to every run (processor sharing: 50 guests
// booting at once finish together, p100 ≈ 1.8 × p50 here).
type markerWait struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   int
	need   int
}

func newMarkerWait(ctx context.Context, n int, t0 time.Time) *markerWait {
	ctx, cancel := context.WithDeadline(ctx, t0.Add(burstMarkerTimeout))
	return &markerWait{ctx: ctx, cancel: cancel, need: (n + 1) / 2}
}

// wait returns the time from t0 to the marker in file, 0 if the wait
// stopped first (half were seen: not an error).
func (m *markerWait) wait(file string, t0 time.Time) (time.Duration, error) {
	err := waitMarkerEvery(m.ctx, file, burstMarkerTimeout, burstPoll)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.seen >= m.need {
			return 0, nil
		}
		return 0, err
	}
	if m.seen++; m.seen >= m.need {
		m.cancel()
	}
	return time.Since(t0), nil
}

// BurstVM is one VM of a burst, timed from the burst's start: until it
// ran (CONTAINER_RUNNING through crimux, DomainCreate returned directly)
// and until the boot marker was in its console log; 0 where it never did.
type BurstVM struct {
	Running, Marker time.Duration
	// The steps before running, from the burst's start: the pod's
	// sandbox (crimux's RunPodSandbox; 0 on the direct path) and the
	// domain's definition (crimux's CreateContainer, libvirt's define).
	Sandboxed, Defined time.Duration
}

// burstResult keeps every VM's times on both paths, in start order: the
// time-to-running curves can be drawn from them.
type burstResult struct {
	Crimux, Direct []BurstVM
}

// burstFigures are the burst's figures: each path's quantile and the
// ratio of crimux's to the direct path's.
var burstFigures = []struct {
	name, ratio string
	q           float64
	marker      bool
}{
	{"vm_burst_50_p50_s", "vm_burst_50_p50_over_direct_ratio", 0.5, false},
	{"vm_burst_50_p95_s", "vm_burst_50_p95_over_direct_ratio", 0.95, false},
	{"vm_burst_50_marker_p50_s", "vm_burst_50_marker_p50_over_direct_ratio", 0.5, true},
}

// phaseBurst runs the direct burst first (and removes it: its guests would
// load the host under crimux's), then crimux's. Both paths' guests run
// under the bench's root cgroup (the direct path's placed there before
// they run, crimux's in their pods' cgroups), weighed as kubelet weighs
// its pods' root, by the host's CPUs (-burst-root-weight;
// cgroups.WeighRoot). The weight decides how the 2 cores are shared
// between the booting guests and libvirtd, crimux and the qemus being
// started; with both paths under it, it is the same split on both.
func (b *bench) phaseBurst(ctx context.Context) error {
	n := b.opts.burst
	weight := runtime.NumCPU()
	if b.opts.burstRootWeight > 0 {
		weight = b.opts.burstRootWeight
	}
	if err := cgroups.WeighRoot(weight); err != nil {
		b.logf("burst: weighing the pods' root cgroup: %v", err)
	}
	t0 := time.Now()
	direct, err := b.directBurst(ctx, n)
	if err != nil {
		return err
	}
	b.logf("burst: direct took %s (removal included)", time.Since(t0).Round(100*time.Millisecond))
	t1 := time.Now()
	crimux, err := b.crimuxBurst(ctx, n)
	b.logf("burst: crimux took %s", time.Since(t1).Round(100*time.Millisecond))
	b.mu.Lock()
	b.burst = burstResult{Crimux: crimux, Direct: direct}
	b.mu.Unlock()
	b.recordBurst(n, crimux, direct, err)
	b.burstChart(n, crimux, direct)
	return nil
}

// burstChart draws how many of the n VMs ran, and had printed the boot
// marker, at each moment after the burst began, on both paths.
func (b *bench) burstChart(n int, crimux, direct []BurstVM) {
	for _, marker := range []bool{false, true} {
		what := "time-to-running (crimux: CONTAINER_RUNNING; direct: DomainCreate returned)"
		if marker {
			what = "time to the boot marker in the console log"
		}
		c := report.Chart{Title: fmt.Sprintf("burst of %d VMs: %s", n, what), XLabel: "seconds since the burst began", YLabel: "VMs"}
		for _, path := range []struct {
			name string
			vms  []BurstVM
		}{{"crimux", crimux}, {"libvirt direct", direct}} {
			var secs []float64
			for _, v := range path.vms {
				t := v.Running
				if marker {
					t = v.Marker
				}
				if t > 0 { // 0: never reached
					secs = append(secs, t.Seconds())
				}
			}
			c.Series = append(c.Series, report.Cumulative(path.name, secs))
		}
		b.res.AddChart("burst", c)
	}
}

// crimuxBurst starts n VM pods at once through crimux and times each until
// ContainerStatus says running, then until the marker is in its CRI log.
func (b *bench) crimuxBurst(ctx context.Context, n int) ([]BurstVM, error) {
	out := make([]BurstVM, n)
	t0, cpu0 := time.Now(), b.readCPUUse()
	markers := newMarkerWait(ctx, n, t0)
	defer markers.cancel()
	err := criclient.Parallel(n, n, func(i int) error {
		// StartContainer may take longer than a CRI call's 2 minutes
		// here: the direct path's DomainCreate has no deadline, and on a
		// slow host (2026-12-03, 17:45) 8 of crimux's 50 starts were cut
		// at 2 minutes while the direct path's last one returned at 116 s.
		v, err := b.createVM(ctx, fmt.Sprintf("burst-%d", i), b.vmContainerConfig(b.opts.burstMiB), nil)
		if err == nil {
			err = b.startContainer(ctx, v, burstMarkerTimeout)
		}
		if err == nil {
			err = b.waitRunning(ctx, v)
		}
		if err != nil {
			return err
		}
		out[i].Running = time.Since(t0)
		out[i].Sandboxed, out[i].Defined = v.sandboxed.Sub(t0), v.created.Sub(t0)
		b.mu.Lock()
		b.burstVMs = append(b.burstVMs, v)
		b.mu.Unlock()
		if out[i].Marker, err = markers.wait(v.logPath, t0); err != nil {
			return fmt.Errorf("VM %s: boot marker in the CRI log: %w", v.name, err)
		}
		if out[i].Marker > 0 {
			return b.setGuestPaused(ctx, v, true)
		}
		return nil
	})
	b.noteBurstCPU("crimux", t0, cpu0)
	// Running again, as kept for the recovery figures.
	if rerr := b.setGuestsPaused(context.WithoutCancel(ctx), false); err == nil {
		err = rerr
	}
	return out, err
}

// directBurst starts n domains at once directly through libvirt (each
// DomainCreate on a connection of its own, as crimux's), times each until DomainCreate returns and
// until the marker is in libvirt's console log, then removes them all.
func (b *bench) directBurst(ctx context.Context, n int) ([]BurstVM, error) {
	out := make([]BurstVM, n)
	t0, cpu0 := time.Now(), b.readCPUUse()
	markers := newMarkerWait(ctx, n, t0)
	defer markers.cancel()
	var mu sync.Mutex
	var vms []*libvirtdirect.VM
	err := criclient.Parallel(n, n, func(i int) error {
		v, _, err := b.direct.Start(b.opts.burstMiB)
		mu.Lock()
		vms = append(vms, v)
		mu.Unlock()
		if err != nil {
			return err
		}
		out[i].Running, out[i].Defined = time.Since(t0), v.Defined.Sub(t0)
		if out[i].Marker, err = markers.wait(v.ConsoleLog(), t0); err != nil {
			return fmt.Errorf("direct VM %s: boot marker: %w", v.Name, err)
		}
		if out[i].Marker > 0 {
			return b.direct.Suspend(v)
		}
		return nil
	})
	b.noteBurstCPU("direct", t0, cpu0)
	if err != nil {
		b.logf("direct burst: %v", err)
	}
	// The guests still booting suspended first (those with a marker
	// already are; libvirt refuses those, which is no matter): they would
	// take the cores the removal needs (30 s for 50 before, 2026-12-03).
	_ = criclient.Parallel(len(vms), len(vms), func(i int) error {
		if vms[i] != nil {
			_ = b.direct.Suspend(vms[i])
		}
		return nil
	})
	rmErr := criclient.Parallel(len(vms), b.opts.workers, func(i int) error { return b.direct.Remove(vms[i]) })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, rmErr
}

// noteBurstCPU records where the CPU went on path from t0 (when cpu0 was
// read) until its guests were waited for: the guests' marker differs
// between the paths by how much CPU reached them.
func (b *bench) noteBurstCPU(path string, t0 time.Time, cpu0 cpuUse) {
	use := b.readCPUUse()
	desc := use.since(cpu0).describe(use.at.Sub(t0), runtime.NumCPU())
	b.logf("burst: CPU on the %s path %s", path, desc)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.burstCPU == nil {
		b.burstCPU = map[string]string{}
	}
	b.burstCPU[path] = desc
}

// burstSamples are the running (or marker) times of the VMs that got there.
func burstSamples(vms []BurstVM, marker bool) stats.Samples {
	var s stats.Samples
	for _, v := range vms {
		t := v.Running
		if marker {
			t = v.Marker
		}
		if t > 0 {
			s = append(s, t)
		}
	}
	return s
}

// burstQuantile is the quantile q over all n VMs, those that never got
// there counted as slowest; NaN when q falls among them.
func burstQuantile(s stats.Samples, n int, q float64) float64 {
	all := append(stats.Samples(nil), s...)
	for len(all) < n {
		all = append(all, time.Duration(math.MaxInt64))
	}
	v := all.Quantile(q)
	if v == time.Duration(math.MaxInt64) || len(all) == 0 {
		return math.NaN()
	}
	return v.Seconds()
}

func (b *bench) recordBurst(n int, crimux, direct []BurstVM, err error) {
	for _, marker := range []bool{false, true} {
		c, d := burstSamples(crimux, marker), burstSamples(direct, marker)
		what := "VMBurst"
		if marker {
			what = "VMBurstMarker"
		}
		b.samplesOf(what, d, c)
		b.logf("burst of %d VMs, %s: crimux %s; direct %s", n, what, c.Summary(0.5, 0.95, 1), d.Summary(0.5, 0.95, 1))
	}
	b.logf("burst steps from its start (p50, p100): crimux: sandbox %s, defined %s, running %s; direct: defined %s, running %s",
		stepOf(crimux, func(v BurstVM) time.Duration { return v.Sandboxed }), stepOf(crimux, func(v BurstVM) time.Duration { return v.Defined }),
		stepOf(crimux, func(v BurstVM) time.Duration { return v.Running }),
		stepOf(direct, func(v BurstVM) time.Duration { return v.Defined }), stepOf(direct, func(v BurstVM) time.Duration { return v.Running }))
	for _, f := range burstFigures {
		c, d := burstSamples(crimux, f.marker), burstSamples(direct, f.marker)
		cq, dq := burstQuantile(c, n, f.q), burstQuantile(d, n, f.q)
		b.res.Set(f.name, cq, c.Summary(0.5, 0.95, 1), d.Summary(0.5, 0.95, 1))
		b.res.Set(f.ratio, cq/dq, fmt.Sprintf("%.2f s", cq), fmt.Sprintf("%.2f s", dq))
		for _, name := range []string{f.name, f.ratio} {
			b.res.Note(name, "%d VMs of %d MiB at once on each path, direct first (removed before crimux's start); the marker wait stops once half the guests printed it", n, b.opts.burstMiB)
			if f.marker && f.name != name {
				b.mu.Lock()
				b.res.Note(name, "CPU from each burst's start until its guests were waited for: crimux %s; direct %s", b.burstCPU["crimux"], b.burstCPU["direct"])
				b.mu.Unlock()
			}
			if len(c) < n || len(d) < n {
				b.res.Note(name, "%d (crimux) and %d (direct) of %d reached it, the others count as slowest: %v", len(c), len(d), n, err)
			}
		}
	}
}

// stepOf is the p50 and p100 of one step's times over the VMs that
// reached it.
func stepOf(vms []BurstVM, at func(BurstVM) time.Duration) string {
	var s stats.Samples
	for _, v := range vms {
		if t := at(v); t > 0 {
			s = append(s, t)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f s / %.2f s", s.Quantile(0.5).Seconds(), s.Quantile(1).Seconds())
}
