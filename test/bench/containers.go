package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/report"
	"github.com/crimux/crimux/test/bench/stats"
)

// The container figures: small RPCs, lists and the pod lifecycle, each
// through crimux and against containerd's socket, alternating.

// rpcBlock is how many calls run on one path before the next takes over.
const rpcBlock = 50

// threePaths are the paths of the rpc and lists phases: containerd's
// socket, crimux, and the raw forwarder in front of containerd, whose
// difference to crimux is what crimux does beyond the hop.
var threePaths = []stats.Path{stats.Direct, stats.ViaCrimux, stats.RawProxy}

// rpcFigures names what one small RPC's measurement records: p50 and p99
// differences to the direct path, and (if named) to the raw forwarder.
type rpcFigures struct {
	rpc, p50, p99, p50OverRaw, p99OverRaw string
}

// rpcOverhead measures one small RPC on the three paths and records its
// p50 and p99 differences (crimux minus direct, crimux minus the raw
// forwarder) in µs.
func (b *bench) rpcOverhead(ctx context.Context, f rpcFigures, call func(context.Context, *criclient.Endpoint) error) error {
	n := b.opts.rpcCalls
	one := func(p stats.Path) (time.Duration, error) {
		e := b.endpointOf(p)
		return stats.Timed(func() error { return call(ctx, e) })
	}
	// Warm the connections and the servers up, unrecorded.
	if _, err := stats.AlternatePaths(min(n, 200), rpcBlock, threePaths, one); err != nil {
		return err
	}
	cpu0, rawCPU0 := b.crimux.CPUTime(), b.rawProxyCPU()
	s, err := stats.AlternatePaths(n, rpcBlock, threePaths, one)
	if err != nil {
		return err
	}
	perCall := (b.crimux.CPUTime() - cpu0) / time.Duration(n)
	rawPerCall := (b.rawProxyCPU() - rawCPU0) / time.Duration(n)
	d, c, r := s[stats.Direct], s[stats.ViaCrimux], s[stats.RawProxy]
	b.samplesOfPaths(f.rpc, s)
	b.latencyChart("rpc", f.rpc+", one running container", s)
	b.res.Set(f.p50, stats.Micros(c.Quantile(0.5)-d.Quantile(0.5)), c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	b.res.Set(f.p99, stats.Micros(c.Quantile(0.99)-d.Quantile(0.99)), c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	names := []string{f.p50, f.p99}
	if f.p50OverRaw != "" {
		raw := "raw forwarder: " + r.Summary(0.5, 0.99)
		b.res.Set(f.p50OverRaw, stats.Micros(c.Quantile(0.5)-r.Quantile(0.5)), c.Summary(0.5, 0.99), raw)
		b.res.Set(f.p99OverRaw, stats.Micros(c.Quantile(0.99)-r.Quantile(0.99)), c.Summary(0.5, 0.99), raw)
		names = append(names, f.p50OverRaw, f.p99OverRaw)
	}
	for _, name := range names {
		b.res.Note(name, "CPU per call: crimux %.0f µs, the raw forwarder %.0f µs", stats.Micros(perCall), stats.Micros(rawPerCall))
	}
	b.logf("%s: crimux %s; raw forwarder %s; direct %s; CPU per call: crimux %.0f µs, raw forwarder %.0f µs",
		f.rpc, c.Summary(0.5, 0.99), r.Summary(0.5, 0.99), d.Summary(0.5, 0.99), stats.Micros(perCall), stats.Micros(rawPerCall))
	return nil
}

func (b *bench) endpointOf(p stats.Path) *criclient.Endpoint {
	switch p {
	case stats.Direct:
		return b.ctd
	case stats.RawProxy:
		return b.raw
	}
	return b.cri
}

func (b *bench) phaseRPC(ctx context.Context) error {
	err := b.rpcOverhead(ctx, rpcFigures{rpc: "Version", p50: "rpc_version_p50_overhead_us", p99: "rpc_version_p99_overhead_us"},
		func(ctx context.Context, e *criclient.Endpoint) error {
			_, err := e.RT.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		})
	if err != nil {
		return fmt.Errorf("Version: %w", err)
	}
	ids, err := b.runContainerPod(ctx, b.cri, b.containerPod(fmt.Sprintf("status-%d", b.podSeq())))
	if ids.pod != "" {
		defer func() { _ = criclient.RemovePod(context.WithoutCancel(ctx), b.cri, ids.pod) }()
	}
	if err != nil {
		return err
	}
	err = b.rpcOverhead(ctx, rpcFigures{rpc: "ContainerStatus",
		p50: "rpc_containerstatus_p50_overhead_us", p99: "rpc_containerstatus_p99_overhead_us",
		p50OverRaw: "rpc_containerstatus_p50_over_rawproxy_us", p99OverRaw: "rpc_containerstatus_p99_over_rawproxy_us"},
		func(ctx context.Context, e *criclient.Endpoint) error {
			resp, err := e.RT.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ids.container})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				err = fmt.Errorf("container %s is %s, not running", ids.container, resp.GetStatus().GetState())
			}
			return err
		})
	if err != nil {
		return fmt.Errorf("ContainerStatus: %w", err)
	}
	return nil
}

// phaseLifecycle runs the pod lifecycle rounds, alternating which path
// goes first.
func (b *bench) phaseLifecycle(ctx context.Context) error {
	// A round that fails (another user of the bed killed the pod) is
	// run again: only complete rounds are timed.
	one := func(p stats.Path) (time.Duration, error) {
		var err error
		for range 3 {
			var t time.Duration
			if t, err = b.podLifecycle(ctx, b.endpointOf(p), fmt.Sprintf("lifecycle-%d", b.podSeq())); err == nil {
				return t, nil
			}
			b.logf("lifecycle round on %s failed: %v", p, err)
		}
		return 0, err
	}
	if _, _, err := stats.Alternate(1, 1, one); err != nil { // warm-up
		return err
	}
	d, c, err := stats.Alternate(b.opts.lifecycleRounds, 1, one)
	if err != nil {
		return err
	}
	b.samplesOf("PodLifecycle", d, c)
	b.res.Set("pod_lifecycle_ratio", stats.Ratio(c.Median(), d.Median()), c.Summary(0.5, 0.9), d.Summary(0.5, 0.9))
	b.logf("pod lifecycle: crimux %s; direct %s", c.Summary(0.5, 0.9), d.Summary(0.5, 0.9))
	return nil
}

// startContainerPods tops the bench's running busybox pods up to n,
// through crimux, in parallel. A pod that fails half-way is removed at
// once; failures are returned but the pods that run are kept, so a phase
// can go on with fewer (other users of the bed can kill pods: a kubelet
// kills every pod it does not know).
func (b *bench) startContainerPods(ctx context.Context, n int) error {
	have := len(b.pods)
	if n <= have {
		return nil
	}
	start := time.Now()
	made := make([]containerPodIDs, n-have)
	err := criclient.Parallel(n-have, b.opts.workers, func(i int) error {
		ids, err := b.runContainerPod(ctx, b.cri, b.hostNetPod(fmt.Sprintf("many-%d-%d", have+i, b.podSeq())))
		if err != nil && ids.pod != "" {
			_ = criclient.RemovePod(context.WithoutCancel(ctx), b.ctd, ids.pod)
			return err
		}
		made[i] = ids
		return err
	})
	for _, ids := range made {
		if ids.container != "" {
			b.pods = append(b.pods, ids)
		}
	}
	b.logf("%d container pods running (%d new in %s)", len(b.pods), len(b.pods)-have, time.Since(start).Round(time.Millisecond))
	return err
}

// podSeq numbers pod names so that a retry never reuses one.
func (b *bench) podSeq() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return b.seq
}

// stopContainerPods removes the pods beyond the first keep.
func (b *bench) stopContainerPods(ctx context.Context, keep int) error {
	if keep >= len(b.pods) {
		return nil
	}
	extra := b.pods[keep:]
	err := criclient.Parallel(len(extra), b.opts.workers, func(i int) error {
		return criclient.RemovePod(ctx, b.ctd, extra[i].pod)
	})
	b.pods = b.pods[:keep]
	return err
}

// dropDeadPods forgets (and removes) kept pods whose container no longer
// runs.
func (b *bench) dropDeadPods(ctx context.Context) {
	resp, err := b.ctd.RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}, LabelSelector: b.labels(),
	}})
	if err != nil {
		return
	}
	running := map[string]bool{}
	for _, c := range resp.GetContainers() {
		running[c.GetId()] = true
	}
	alive := b.pods[:0]
	for _, p := range b.pods {
		if running[p.container] {
			alive = append(alive, p)
		} else {
			_ = criclient.RemovePod(ctx, b.ctd, p.pod)
		}
	}
	if dead := len(b.pods) - len(alive); dead > 0 {
		b.logf("%d kept container pods were no longer running (killed by another user of the bed?): replaced", dead)
	}
	b.pods = alive
}

// phaseLists measures ListContainers and ListPodSandbox with listPods
// pods running (each with a container), then keeps only the pods the
// recovery figure needs.
func (b *bench) phaseLists(ctx context.Context) error {
	defer func() { _ = b.stopContainerPods(context.WithoutCancel(ctx), b.opts.recoveryContainers) }()
	b.dropDeadPods(ctx)
	if err := b.startContainerPods(ctx, b.opts.listPods); err != nil {
		b.logf("lists: %v", err)
		// One more try for the missing ones; then measure with what runs.
		_ = b.startContainerPods(ctx, b.opts.listPods)
		if len(b.pods) < b.opts.listPods*9/10 {
			return fmt.Errorf("only %d of %d pods run: %w", len(b.pods), b.opts.listPods, err)
		}
	}
	var sizes [3]int
	for _, l := range listRPCs() {
		if err := b.measureList(ctx, l, &sizes); err != nil {
			return err
		}
	}
	return nil
}

// listRPC is a list call measured by phaseLists: its figure, and its
// figure over the raw forwarder ("" for none).
type listRPC struct {
	rpc, name, overRaw string
	call               func(context.Context, *criclient.Endpoint) (int, error)
}

// listRPCs are the list calls phaseLists measures, in order.
func listRPCs() []listRPC {
	return []listRPC{
		{"ListContainers", "list_containers_200_ratio", "list_containers_200_over_rawproxy_ratio",
			func(ctx context.Context, e *criclient.Endpoint) (int, error) {
				r, err := e.RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
				return len(r.GetContainers()), err
			}},
		{"ListPodSandbox", "list_sandboxes_200_ratio", "", func(ctx context.Context, e *criclient.Endpoint) (int, error) {
			r, err := e.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return len(r.GetItems()), err
		}},
	}
}

// measureList times l on the three paths (after a warm-up) with crimux's
// and the raw forwarder's CPU per call, and records its figures; sizes
// gets the number of items each path's last list held.
func (b *bench) measureList(ctx context.Context, l listRPC, sizes *[3]int) error {
	one := func(p stats.Path) (time.Duration, error) {
		var n int
		t, err := stats.Timed(func() (err error) { n, err = l.call(ctx, b.endpointOf(p)); return err })
		sizes[p] = n
		return t, err
	}
	if _, err := stats.AlternatePaths(10, 5, threePaths, one); err != nil {
		return fmt.Errorf("%s: %w", l.rpc, err)
	}
	cpu0, rawCPU0 := b.crimux.CPUTime(), b.rawProxyCPU()
	s, err := stats.AlternatePaths(b.opts.listCalls, 5, threePaths, one)
	if err != nil {
		return fmt.Errorf("%s: %w", l.rpc, err)
	}
	perCall := (b.crimux.CPUTime() - cpu0) / time.Duration(max(1, b.opts.listCalls))
	rawPerCall := (b.rawProxyCPU() - rawCPU0) / time.Duration(max(1, b.opts.listCalls))
	if min(sizes[stats.Direct], sizes[stats.ViaCrimux], sizes[stats.RawProxy]) < len(b.pods) {
		return fmt.Errorf("%s: the lists held %d (crimux), %d (direct) and %d (raw forwarder) items, fewer than the %d bench pods: pods vanished while measuring",
			l.rpc, sizes[stats.ViaCrimux], sizes[stats.Direct], sizes[stats.RawProxy], len(b.pods))
	}
	d, c, r := s[stats.Direct], s[stats.ViaCrimux], s[stats.RawProxy]
	b.samplesOfPaths(l.rpc, s)
	b.latencyChart("lists", fmt.Sprintf("%s, %d items", l.rpc, sizes[stats.Direct]), s)
	b.res.Set(l.name, stats.Ratio(c.Median(), d.Median()), c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	names := []string{l.name}
	if l.overRaw != "" {
		b.res.Set(l.overRaw, stats.Ratio(c.Median(), r.Median()), c.Summary(0.5, 0.99), "raw forwarder: "+r.Summary(0.5, 0.99))
		names = append(names, l.overRaw)
	}
	for _, name := range names {
		b.res.Note(name, "%d bench pods; the lists held %d items through crimux, %d direct (other users' pods included); CPU per call: crimux %.0f µs, the raw forwarder %.0f µs",
			len(b.pods), sizes[stats.ViaCrimux], sizes[stats.Direct], stats.Micros(perCall), stats.Micros(rawPerCall))
	}
	b.logf("%s (%d items): crimux %s; raw forwarder %s; direct %s", l.rpc, sizes[stats.Direct],
		c.Summary(0.5, 0.99), r.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	return nil
}

// latencyChart adds the latency distributions of one measurement to the
// phase's picture.
func (b *bench) latencyChart(phase, title string, s map[stats.Path]stats.Samples) {
	c := report.Chart{Title: title, XLabel: "latency (µs, log scale)", YLabel: "fraction of calls", LogX: true}
	for _, p := range threePaths {
		var us []float64
		for _, t := range s[p] {
			us = append(us, stats.Micros(t))
		}
		c.Series = append(c.Series, report.CDF(p.String(), us))
	}
	b.res.AddChart(phase, c)
}
