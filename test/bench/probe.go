package main

import (
	"fmt"
	"slices"

	"github.com/crimux/crimux/test/bench/machine"
	"github.com/crimux/crimux/test/bench/stats"
)

// probeHost runs the CPU probe before a phase (machine.Probe: how fast
// this host is right now) and says what it found and how much of the
// host's CPU time the hypervisor took since the previous phase.
func (b *bench) probeHost() string {
	t := machine.Probe()
	busy, steal := hostBusy()
	b.probes = append(b.probes, t)
	s := fmt.Sprintf("CPU probe %.1f ms", stats.Millis(t))
	if b.lastBusy > 0 {
		if d := busy - b.lastBusy; d > 0 {
			s += fmt.Sprintf(", stolen by the hypervisor since the last phase %.1f %%", 100*(steal-b.lastSteal).Seconds()/d.Seconds())
		}
	}
	b.lastBusy, b.lastSteal = busy, steal
	return s
}

// recordProbes sets host_cpu_probe_ms: the median probe of the run, with
// the fastest and slowest, so that runs on a faster and a slower host can
// be told apart from a faster and a slower crimux.
func (b *bench) recordProbes() {
	b.probes = append(b.probes, machine.Probe()) // after the last phase
	sorted := slices.Clone(b.probes)
	slices.Sort(sorted)
	b.res.Set("host_cpu_probe_ms", stats.Millis(sorted[len(sorted)/2]), "", "")
	b.res.Note("host_cpu_probe_ms", "%d probes, %.1f-%.1f ms", len(sorted), stats.Millis(sorted[0]), stats.Millis(sorted[len(sorted)-1]))
	b.logf("CPU probe: %.1f ms median of %d, %.1f-%.1f ms", stats.Millis(sorted[len(sorted)/2]), len(sorted),
		stats.Millis(sorted[0]), stats.Millis(sorted[len(sorted)-1]))
}
