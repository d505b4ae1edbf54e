package main

import (
	"context"
	"fmt"
	"time"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/stats"
)

// The burst of clones: n Debian guest pods asking for their template
// started at once (a goroutine each, as the burst phase starts its VMs),
// each timed from its RunPodSandbox until its guest agent answers
// guest-ping; a clone that booted instead counts as never ready. With
// all of them running, instantSettle after the last one answered, each
// clone's qemu's Pss: what the clones share (KSM, if the host runs it)
// shows there, beside the lone clone's Rss (instant_mem.go).

// instantBurstTimeout bounds the burst: n clones' restores (each reads
// its template's saved memory) and agent calls under TCG on 2 cores.
const instantBurstTimeout = 5 * time.Minute

var instantBurstFigures = []struct {
	name string
	q    float64
}{{"vm_instant_burst_20_p50_s", 0.5}, {"vm_instant_burst_20_p95_s", 0.95}}

// phaseInstantBurst starts the n clones, records their times and Pss, and
// removes them all, whatever failed.
func (b *bench) phaseInstantBurst(ctx context.Context, n int) error {
	vms := make([]*vmPod, n)
	ready := make([]time.Duration, n) // 0: never ready from its template
	defer func() {
		t0 := time.Now()
		err := criclient.Parallel(n, b.opts.workers, func(i int) error {
			if vms[i] == nil {
				return nil
			}
			return b.removeVM(context.WithoutCancel(ctx), vms[i])
		})
		b.logf("instant burst: %d clones removed in %s (%v)", n, time.Since(t0).Round(100*time.Millisecond), err)
	}()
	bctx, cancel := context.WithTimeout(ctx, instantBurstTimeout)
	defer cancel()
	t0 := time.Now()
	err := criclient.Parallel(n, n, func(i int) error { return b.startBurstClone(ctx, bctx, i, vms, ready) })
	var s stats.Samples
	for _, t := range ready {
		if t > 0 {
			s = append(s, t)
		}
	}
	b.logf("instant burst of %d clones: %d ready from their template in %s: %s (%v)", n, len(s),
		time.Since(t0).Round(100*time.Millisecond), s.Summary(0.5, 0.95, 1), err)
	b.samplesOf("VMInstantBurst", nil, s)
	for _, f := range instantBurstFigures {
		b.res.Set(f.name, burstQuantile(s, n, f.q), s.Summary(0.5, 0.95, 1), "")
		b.res.Note(f.name, "%s; %d pods asking for their template started at once, each from its RunPodSandbox to its agent answering guest-ping; "+
			"a clone counts only if its log says it was restored from its template", instantShape, n)
		if len(s) < n {
			b.res.Note(f.name, "%d of %d ready from their template, the others count as slowest: %v", len(s), n, err)
		}
	}
	if len(s) > 0 {
		if perr := b.burstPss(ctx, vms, ready); err == nil {
			err = perr
		}
	}
	return err
}

// startBurstClone starts clone i of the burst (within bctx, the burst's
// deadline) into vms[i] and, once its guest agent answers and its log
// says it was restored from its template, puts its time into ready[i].
func (b *bench) startBurstClone(ctx, bctx context.Context, i int, vms []*vmPod, ready []time.Duration) error {
	name := fmt.Sprintf("instant-burst-%d", i)
	start := time.Now()
	v, err := b.createVM(bctx, name, b.guestContainerConfig(), asksTemplate(name))
	vms[i] = v
	if err == nil {
		err = b.startContainer(bctx, v, instantBurstTimeout)
	}
	if err == nil {
		if err = waitAgent(bctx, b.direct, v.domain()); err != nil {
			err = fmt.Errorf("guest agent of %s: %w", v.domain(), err)
		}
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	if _, err := howStarted(ctx, v); err != nil {
		return err
	}
	ready[i] = took
	return nil
}

// burstPss waits instantSettle, then reads the Pss of every ready clone's
// qemu with all of them running: vm_instant_clone_pss_mib is its median.
func (b *bench) burstPss(ctx context.Context, vms []*vmPod, ready []time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(instantSettle):
	}
	var pss, rss []float64
	var sum float64
	var failed []error
	for i, v := range vms {
		if ready[i] == 0 {
			continue
		}
		m, err := readQemuMemory(v.domain())
		if err != nil {
			failed = append(failed, err)
			continue
		}
		pss, rss, sum = append(pss, m.pssMiB), append(rss, m.rssMiB), sum+m.pssMiB
	}
	ksm := ksmState()
	b.logf("instant burst: qemu memory of %d clones: Pss median %.0f MiB, sum %.0f MiB; Rss median %.0f MiB; %s",
		len(pss), medianOf(pss), sum, medianOf(rss), ksm)
	const name = "vm_instant_clone_pss_mib"
	if len(pss) > 0 {
		b.res.Set(name, medianOf(pss), fmt.Sprintf("Pss median %.0f MiB (sum %.0f MiB), Rss median %.0f MiB", medianOf(pss), sum, medianOf(rss)), "")
	}
	b.res.Note(name, "%s; %d clones of the burst running, %s after the last agent answered: Pss of each qemu's /proc/PID/smaps_rollup, median; %s",
		instantShape, len(pss), instantSettle, ksm)
	if len(failed) > 0 {
		b.res.Note(name, "%d clones' memory not read, first: %v", len(failed), failed[0])
		return failed[0]
	}
	return nil
}
