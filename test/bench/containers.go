package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container figures: small RPCs, lists and the pod lifecycle, each
// through crimux and against containerd's socket, alternating.

// rpcBlock is how many calls run on one side before the other takes over.
const rpcBlock = 50

// rpcOverhead measures one small RPC on both paths and records its p50 and
// p99 differences (crimux minus direct) in µs.
func (b *bench) rpcOverhead(ctx context.Context, rpc, p50Name, p99Name string, call func(context.Context, *endpoint) error) error {
	n := b.opts.rpcCalls
	one := func(p path) (time.Duration, error) {
		e := b.endpointOf(p)
		return timed(func() error { return call(ctx, e) })
	}
	// Warm both connections and both servers up, unrecorded.
	if _, _, err := alternate(min(n, 200), rpcBlock, one); err != nil {
		return err
	}
	cpu0 := b.crimux.cpuTime()
	d, c, err := alternate(n, rpcBlock, one)
	if err != nil {
		return err
	}
	perCall := (b.crimux.cpuTime() - cpu0) / time.Duration(n)
	b.samplesOf(rpc, d, c)
	b.res.set(p50Name, us(c.quantile(0.5)-d.quantile(0.5)), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	b.res.set(p99Name, us(c.quantile(0.99)-d.quantile(0.99)), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	for _, name := range []string{p50Name, p99Name} {
		b.res.note(name, "crimux used %.0f µs of CPU per call", us(perCall))
	}
	b.logf("%s: crimux %s; direct %s; crimux CPU %.0f µs/call", rpc, c.summary(0.5, 0.99), d.summary(0.5, 0.99), us(perCall))
	return nil
}

func (b *bench) endpointOf(p path) *endpoint {
	if p == direct {
		return b.ctd
	}
	return b.cri
}

func (b *bench) phaseRPC(ctx context.Context) error {
	err := b.rpcOverhead(ctx, "Version", "rpc_version_p50_overhead_us", "rpc_version_p99_overhead_us",
		func(ctx context.Context, e *endpoint) error {
			_, err := e.rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		})
	if err != nil {
		return fmt.Errorf("Version: %w", err)
	}
	ids, err := b.runContainerPod(ctx, b.cri, fmt.Sprintf("status-%d", b.podSeq()))
	if ids.pod != "" {
		defer func() { _ = removePod(context.WithoutCancel(ctx), b.cri, ids.pod) }()
	}
	if err != nil {
		return err
	}
	err = b.rpcOverhead(ctx, "ContainerStatus", "rpc_containerstatus_p50_overhead_us", "rpc_containerstatus_p99_overhead_us",
		func(ctx context.Context, e *endpoint) error {
			resp, err := e.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ids.container})
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
	one := func(p path) (time.Duration, error) {
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
	if _, _, err := alternate(1, 1, one); err != nil { // warm-up
		return err
	}
	d, c, err := alternate(b.opts.lifecycleRounds, 1, one)
	if err != nil {
		return err
	}
	b.samplesOf("PodLifecycle", d, c)
	b.res.set("pod_lifecycle_ratio", ratio(c.median(), d.median()), c.summary(0.5, 0.9), d.summary(0.5, 0.9))
	b.logf("pod lifecycle: crimux %s; direct %s", c.summary(0.5, 0.9), d.summary(0.5, 0.9))
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
	err := parallel(n-have, b.opts.workers, func(i int) error {
		ids, err := b.runContainerPod(ctx, b.cri, fmt.Sprintf("many-%d-%d", have+i, b.podSeq()))
		if err != nil && ids.pod != "" {
			_ = removePod(context.WithoutCancel(ctx), b.ctd, ids.pod)
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
	err := parallel(len(extra), b.opts.workers, func(i int) error {
		return removePod(ctx, b.ctd, extra[i].pod)
	})
	b.pods = b.pods[:keep]
	return err
}

// dropDeadPods forgets (and removes) kept pods whose container no longer
// runs.
func (b *bench) dropDeadPods(ctx context.Context) {
	resp, err := b.ctd.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
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
			_ = removePod(ctx, b.ctd, p.pod)
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
	var sizes [2]int
	lists := []struct {
		rpc, name string
		call      func(context.Context, *endpoint) (int, error)
	}{
		{"ListContainers", "list_containers_200_ratio", func(ctx context.Context, e *endpoint) (int, error) {
			r, err := e.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return len(r.GetContainers()), err
		}},
		{"ListPodSandbox", "list_sandboxes_200_ratio", func(ctx context.Context, e *endpoint) (int, error) {
			r, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return len(r.GetItems()), err
		}},
	}
	for _, l := range lists {
		one := func(p path) (time.Duration, error) {
			var n int
			t, err := timed(func() (err error) { n, err = l.call(ctx, b.endpointOf(p)); return err })
			sizes[p] = n
			return t, err
		}
		if _, _, err := alternate(10, 5, one); err != nil {
			return fmt.Errorf("%s: %w", l.rpc, err)
		}
		cpu0 := b.crimux.cpuTime()
		d, c, err := alternate(b.opts.listCalls, 5, one)
		if err != nil {
			return fmt.Errorf("%s: %w", l.rpc, err)
		}
		perCall := (b.crimux.cpuTime() - cpu0) / time.Duration(max(1, b.opts.listCalls))
		if sizes[direct] < len(b.pods) || sizes[viaCrimux] < len(b.pods) {
			return fmt.Errorf("%s: the lists held %d (crimux) and %d (direct) items, fewer than the %d bench pods: pods vanished while measuring",
				l.rpc, sizes[viaCrimux], sizes[direct], len(b.pods))
		}
		b.samplesOf(l.rpc, d, c)
		b.res.set(l.name, ratio(c.median(), d.median()), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
		b.res.note(l.name, "%d bench pods; the lists held %d items through crimux, %d direct (other users' pods included); crimux used %.0f µs of CPU per call",
			len(b.pods), sizes[viaCrimux], sizes[direct], us(perCall))
		b.logf("%s (%d items): crimux %s; direct %s", l.rpc, sizes[direct], c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	}
	return nil
}
