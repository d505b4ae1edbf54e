package main

import (
	"context"
	"fmt"
	"time"

	"github.com/crimux/crimux/test/bench/loadgen"
	"github.com/crimux/crimux/test/bench/stats"
)

// The load figures: crimux's ContainerStatus while exec sessions run in VM
// guests and many CRI clients poll it, against the same status asked of an
// idle crimux. A probe (one client in a process of its own, load_probe.go,
// a call every probeEvery) asks the status of a VM and of a container
// through crimux in turn, and of the container on containerd's socket for
// context: first alone, then while -load-exec-sessions sessions run
// `sh -c 'echo x; sleep 1'` again and again in -load-vms guests of the
// agent image (kubectl exec's path: CRI Exec and the streaming server) and
// -load-clients clients, each on a connection of its own, poll every
// -load-client-period as kubelet's relist does (ListPodSandbox,
// ListContainers, one container's status). Every failed call of any of
// them counts in load_errors.

var loadFigures = []string{"load_status_idle_p99_ms", "load_status_p99_ms", "load_status_p99_over_idle_ratio",
	"load_status_vm_p99_over_idle_ratio", "load_status_container_p99_over_idle_ratio", "load_status_direct_p99_over_idle_ratio", "load_exec_sessions", "load_exec_p50_ms", "load_exec_p99_ms", "load_errors"}

// loadRamp spreads the sessions' first execs; the probe's window opens
// loadSettle after it, once every session has an exec under way.
const (
	loadRamp   = 5 * time.Second
	loadSettle = 3 * time.Second
)

// loadRun is what the load recorded besides the probe's window.
type loadRun struct {
	exec    execLoad
	clients clientLoad
	cpu     string // where the host's CPU went during the load
}

func (b *bench) phaseLoad(ctx context.Context) error {
	if b.opts.loadVMs < 1 {
		return fmt.Errorf("-load-vms %d: the probe asks a VM's status: at least 1", b.opts.loadVMs)
	}
	t, err := b.startLoadTargets(ctx, b.opts.loadVMs)
	defer func() {
		if err := b.removeLoadTargets(ctx, t); err != nil {
			b.logf("load: removing its pods: %v", err)
		}
	}()
	if err != nil {
		return err
	}
	idle, err := b.probeWindow(ctx, t, b.opts.loadIdle)
	if err != nil {
		return err
	}
	b.logf("load: idle ContainerStatus: crimux %s (VM %s; container %s); direct %s", idle.throughCrimux().Summary(0.5, 0.99),
		idle.vm.Samples().Summary(0.5, 0.99), idle.ctr.Samples().Summary(0.5, 0.99), idle.direct.Samples().Summary(0.5, 0.99))
	loaded, run, err := b.underLoad(ctx, t)
	if err != nil {
		return err
	}
	b.recordLoad(idle, loaded, run)
	return nil
}

// underLoad runs the exec sessions and the polling clients, and the
// probe's window while they all run.
func (b *bench) underLoad(ctx context.Context, t loadTargets) (*probeSamples, *loadRun, error) {
	conns, err := b.dialClients(b.opts.loadClients)
	if err != nil {
		return nil, nil, err
	}
	defer closeAll(conns)
	run := &loadRun{}
	targets := t.statusTargets()
	stop := make(chan struct{})
	cpu0, t0 := b.readCPUUse(), time.Now()
	period := b.opts.loadClientPeriod
	waitClients := loadgen.Start(stop, len(conns), period, period, func(i int) {
		pollRound(ctx, conns[i], targets[i%len(targets)], &run.clients)
	})
	waitExec := loadgen.Start(stop, b.opts.loadSessions, 0, loadRamp, func(i int) {
		b.execSession(ctx, t.vms[i%len(t.vms)].container, &run.exec)
	})
	b.logf("load: %d exec sessions into %d VMs, %d clients polling every %s", b.opts.loadSessions, len(t.vms), len(conns), period)
	select {
	case <-time.After(loadRamp + loadSettle):
	case <-ctx.Done():
	}
	loaded, err := b.probeWindow(ctx, t, b.opts.loadDuration)
	close(stop)
	waitClients()
	waitExec()
	if err != nil {
		return nil, nil, err
	}
	run.cpu = b.readCPUUse().since(cpu0).describe(time.Since(t0), b.host.Cores)
	return loaded, run, ctx.Err()
}

// recordLoad sets the load figures.
func (b *bench) recordLoad(idle, loaded *probeSamples, run *loadRun) {
	b.recordLoadStatus(idle, loaded, run)
	b.recordLoadExec(loaded, run)
	errs := run.exec.outcomes.Errors() + run.clients.outcomes.Errors() + idle.outcomes.Errors() + loaded.outcomes.Errors()
	b.res.Set("load_errors", float64(errs), "", "")
	b.res.Note("load_errors", "exec: %s; clients: %s; probe idle: %s; probe under load: %s",
		run.exec.outcomes.String(), run.clients.outcomes.String(), idle.outcomes.String(), loaded.outcomes.String())
	for _, name := range loadFigures {
		b.res.Note(name, "%d exec sessions (%s) into %d VMs of %s, %d clients polling every %s",
			b.opts.loadSessions, b.execPath(), b.opts.loadVMs, vmAgentImage, b.opts.loadClients, b.opts.loadClientPeriod)
	}
	b.res.Note("load_status_p99_over_idle_ratio", "CPU during the load %s", run.cpu)
	b.logf("load: errors %d; exec: %s; clients: %s", errs, run.exec.outcomes.String(), run.clients.outcomes.String())
	b.logf("load: CPU %s", run.cpu)
}

// recordLoadStatus sets the ContainerStatus figures: the probe's p99
// through crimux (VMs and the container together), idle and under load,
// and the direct path's for context.
func (b *bench) recordLoadStatus(idle, loaded *probeSamples, run *loadRun) {
	ic, lc := idle.throughCrimux(), loaded.throughCrimux()
	id, ld := idle.direct.Samples(), loaded.direct.Samples()
	b.samplesOf("LoadContainerStatusIdle", id, ic)
	b.samplesOf("LoadContainerStatus", ld, lc)
	split := func(p *probeSamples) string {
		return fmt.Sprintf("VM %s; container %s", p.vm.Samples().Summary(0.5, 0.99), p.ctr.Samples().Summary(0.5, 0.99))
	}
	idleP99, loadP99 := ic.Quantile(0.99), lc.Quantile(0.99)
	b.res.Set("load_status_idle_p99_ms", stats.Millis(idleP99), ic.Summary(0.5, 0.99), id.Summary(0.5, 0.99))
	b.res.Note("load_status_idle_p99_ms", "%s", split(idle))
	b.res.Set("load_status_p99_ms", stats.Millis(loadP99), lc.Summary(0.5, 0.99), ld.Summary(0.5, 0.99))
	b.res.Note("load_status_p99_ms", "%s; the polling clients' own: ContainerStatus %s, lists %s", split(loaded),
		run.clients.status.Samples().Summary(0.5, 0.99), run.clients.lists.Samples().Summary(0.5, 0.99))
	b.res.Set("load_status_p99_over_idle_ratio", stats.Ratio(loadP99, idleP99), stats.Human(loadP99), stats.Human(idleP99))
	b.setP99Ratio("load_status_vm_p99_over_idle_ratio", idle.vm.Samples(), loaded.vm.Samples())
	b.setP99Ratio("load_status_container_p99_over_idle_ratio", idle.ctr.Samples(), loaded.ctr.Samples())
	b.setP99Ratio("load_status_direct_p99_over_idle_ratio", id, ld)
	b.logf("load: ContainerStatus under load: crimux %s (%s); direct %s", lc.Summary(0.5, 0.99), split(loaded), ld.Summary(0.5, 0.99))
}

// setP99Ratio sets name to loaded's p99 over idle's.
func (b *bench) setP99Ratio(name string, idle, loaded stats.Samples) {
	b.res.Set(name, stats.Ratio(loaded.Quantile(0.99), idle.Quantile(0.99)),
		"under load "+stats.Human(loaded.Quantile(0.99)), "idle "+stats.Human(idle.Quantile(0.99)))
}

// recordLoadExec sets the exec figures: how many sessions had a command
// running in a guest at once during the probe's window, and how long an
// exec that worked took.
func (b *bench) recordLoadExec(loaded *probeSamples, run *loadRun) {
	mean := run.exec.ran.Mean(loaded.from, loaded.to)
	b.res.Set("load_exec_sessions", mean, "", "")
	b.res.Note("load_exec_sessions", "execs that worked, running at once: %.1f on average over the probe's window, %d at most; "+
		"execs asked for at once (refused ones included): %d at most", mean, run.exec.ran.Peak(), run.exec.inFlight.Peak())
	ex := run.exec.took.Samples()
	if len(ex) > 0 { // else NaN: no exec worked
		b.res.Set("load_exec_p50_ms", stats.Millis(ex.Quantile(0.5)), ex.Summary(0.5, 0.99), "")
		b.res.Set("load_exec_p99_ms", stats.Millis(ex.Quantile(0.99)), ex.Summary(0.5, 0.99), "")
	}
	b.logf("load: exec sessions running at once: %.1f on average; exec %s", mean, ex.Summary(0.5, 0.99))
}

func (b *bench) execPath() string {
	if b.opts.loadExecSync {
		return "ExecSync"
	}
	return "Exec + the streaming server"
}
