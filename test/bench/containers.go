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
	d, c, err := alternate(n, rpcBlock, one)
	if err != nil {
		return err
	}
	b.samplesOf(rpc, d, c)
	b.res.set(p50Name, us(c.quantile(0.5)-d.quantile(0.5)), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	b.res.set(p99Name, us(c.quantile(0.99)-d.quantile(0.99)), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	b.logf("%s: crimux %s; direct %s", rpc, c.summary(0.5, 0.99), d.summary(0.5, 0.99))
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
	ids, err := b.runContainerPod(ctx, b.cri, "status")
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
	round := 0
	one := func(p path) (time.Duration, error) {
		round++
		return b.podLifecycle(ctx, b.endpointOf(p), fmt.Sprintf("lifecycle-%d", round))
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

// startContainerPods runs n busybox pods through crimux, in parallel, and
// remembers them for the recovery figure and cleanup.
func (b *bench) startContainerPods(ctx context.Context, n int) error {
	have := len(b.pods)
	if n <= have {
		return nil
	}
	start := time.Now()
	made := make([]containerPodIDs, n-have)
	err := parallel(n-have, b.opts.workers, func(i int) error {
		ids, err := b.runContainerPod(ctx, b.cri, fmt.Sprintf("many-%d", have+i))
		made[i] = ids
		return err
	})
	for _, ids := range made {
		if ids.pod != "" {
			b.pods = append(b.pods, ids)
		}
	}
	b.logf("%d container pods running (%d new in %s)", len(b.pods), n-have, time.Since(start).Round(time.Millisecond))
	return err
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

// phaseLists measures ListContainers and ListPodSandbox with listPods
// pods running (each with a container), then keeps only the pods the
// recovery figure needs.
func (b *bench) phaseLists(ctx context.Context) error {
	if err := b.startContainerPods(ctx, b.opts.listPods); err != nil {
		return err
	}
	defer func() { _ = b.stopContainerPods(context.WithoutCancel(ctx), b.opts.recoveryContainers) }()
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
		d, c, err := alternate(b.opts.listCalls, 5, one)
		if err != nil {
			return fmt.Errorf("%s: %w", l.rpc, err)
		}
		b.samplesOf(l.rpc, d, c)
		b.res.set(l.name, ratio(c.median(), d.median()), c.summary(0.5, 0.99), d.summary(0.5, 0.99))
		b.res.note(l.name, "%d bench pods; the lists held %d items through crimux, %d direct (other users' pods included)",
			len(b.pods), sizes[viaCrimux], sizes[direct])
		b.logf("%s (%d items): crimux %s; direct %s", l.rpc, sizes[direct], c.summary(0.5, 0.99), d.summary(0.5, 0.99))
	}
	return nil
}
