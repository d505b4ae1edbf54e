package main

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// The list figure at scale compares lists of the same length. crimux lists
// the VMs from its store beside containerd's containers, so containerd
// alone holds fewer (50 against 350 with the default counts): the bench
// measures crimux's list, then gives containerd as many more containers
// (created, never started, in the pause-only pods), measures containerd's
// list of the same length, alternating with the raw forwarder's. They
// stay until the clean-up removes their pods (with the pods' other
// containers, alongside the VM pods' removal): removing them one by one
// here took half a minute of the run.

// scaleCalls is how many ListContainers calls per path the scale figure
// makes (a list of 1,000 pods' containers takes a few ms).
const scaleCalls, scaleWarmUp = 200, 10

// listContainersRatio records crimux's ListContainers at scale over
// containerd's of as many containers.
func (b *bench) listContainersRatio(ctx context.Context, name string) error {
	cpu0 := b.crimux.CPUTime()
	crimux, fewer, sizes, err := b.scaleLists(ctx, []stats.Path{stats.ViaCrimux, stats.Direct})
	if err != nil {
		return err
	}
	perCall := (b.crimux.CPUTime() - cpu0) / (scaleWarmUp + scaleCalls) // crimux's calls, warm-up included
	want := sizes[stats.ViaCrimux]
	pads, err := b.padContainerd(ctx, want-sizes[stats.Direct])
	if err != nil {
		return fmt.Errorf("giving containerd %d more containers: %w", want-sizes[stats.Direct], err)
	}
	same, _, padded, err := b.scaleLists(ctx, []stats.Path{stats.Direct, stats.RawProxy})
	if err != nil {
		return err
	}
	if padded[stats.Direct] != want {
		return fmt.Errorf("containerd listed %d containers with the padding, crimux %d: pods changed meanwhile", padded[stats.Direct], want)
	}
	c, d, r := crimux[stats.ViaCrimux], same[stats.Direct], same[stats.RawProxy]
	b.samplesOf("ListContainersScale", d, c)
	b.res.Set(name, stats.Ratio(c.Median(), d.Median()), c.Summary(0.5, 0.99), d.Summary(0.5, 0.99))
	b.res.Note(name, "%d VM pods (%d running), %d container pods (%d with a container): %d containers in crimux's list; containerd's of as many (%d created containers added to its %d, then removed): %s; the raw forwarder's: %s; containerd's own %d: %s (crimux over it %.2f); crimux used %.0f µs of CPU per call",
		len(b.burstVMs)+len(b.stoppedVMs), len(b.burstVMs), len(b.pods)+len(b.pausePods), len(b.pods), want,
		len(pads), sizes[stats.Direct], d.Summary(0.5, 0.99), r.Summary(0.5, 0.99),
		sizes[stats.Direct], fewer.Summary(0.5, 0.99), stats.Ratio(c.Median(), fewer.Median()), stats.Micros(perCall))
	b.logf("ListContainers at scale, %d items: crimux %s; direct %s; raw forwarder %s (containerd's own %d: %s)",
		want, c.Summary(0.5, 0.99), d.Summary(0.5, 0.99), r.Summary(0.5, 0.99), sizes[stats.Direct], fewer.Summary(0.5, 0.99))
	return nil
}

// scaleLists times scaleCalls ListContainers on each of two paths,
// alternating, and returns each path's samples (the second path's alone
// too) and list lengths.
func (b *bench) scaleLists(ctx context.Context, paths []stats.Path) (map[stats.Path]stats.Samples, stats.Samples, map[stats.Path]int, error) {
	sizes := map[stats.Path]int{}
	one := func(p stats.Path) (time.Duration, error) {
		var n int
		t, err := stats.Timed(func() error {
			r, err := b.endpointOf(p).RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			n = len(r.GetContainers())
			return err
		})
		sizes[p] = n
		return t, err
	}
	if _, err := stats.AlternatePaths(scaleWarmUp, 5, paths, one); err != nil {
		return nil, nil, nil, err
	}
	s, err := stats.AlternatePaths(scaleCalls, 5, paths, one)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, s[paths[1]], sizes, nil
}

// padContainerd creates n containers, never started, in the pause-only
// pods (as many in each as it takes), directly through containerd; it
// returns those made.
func (b *bench) padContainerd(ctx context.Context, n int) ([]string, error) {
	pods := len(b.pausePods)
	if pods == 0 {
		return nil, fmt.Errorf("no pause-only pods to hold %d containers", n)
	}
	ids := make([]string, n)
	err := criclient.Parallel(n, b.opts.workers, func(i int) error {
		ctx, cancel := criclient.CallCtx(ctx)
		defer cancel()
		cfg := b.hostNetPod(fmt.Sprintf("pad-%d", i))
		// Pads go round the pods, each a sleeper of its own attempt.
		ctr := b.sleeper()
		ctr.Metadata.Attempt = uint32(i / pods)
		r, err := b.ctd.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: b.pausePods[i%pods], Config: ctr, SandboxConfig: cfg,
		})
		ids[i] = r.GetContainerId()
		return err
	})
	made := ids[:0]
	for _, id := range ids {
		if id != "" {
			made = append(made, id)
		}
	}
	return made, err
}
