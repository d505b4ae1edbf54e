package machine

import (
	"crypto/sha256"
	"runtime"
	"slices"
	"time"
)

// The CPU probe tells a slow host from a slow crimux. This host is a VM
// whose speed changes by the hour (docs/benchmarks.md: every phase 15-40 %
// slower in one run than in another of the same code an hour before), and
// the bench's figures are ratios and differences of two paths measured in
// the same minutes, which a slower host moves too: a process's hop costs
// more of a slower CPU, and a busy scheduler widens it. The probe times
// the same small piece of work, single-threaded, before every phase, so a
// reader can set a run's figures beside its host's speed.

// probeBytes is the probe's work: SHA-256 of 16 MiB, about 12 ms here
// (SHA-NI).
const probeBytes = 16 << 20

// probeRounds are timed per probe; the probe is their median.
const probeRounds = 5

// Probe times probeRounds rounds of the probe's work on one goroutine and
// returns their median.
func Probe() time.Duration {
	buf := make([]byte, probeBytes)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	runtime.Gosched()
	times := make([]time.Duration, probeRounds)
	for i := range times {
		start := time.Now()
		sum := sha256.Sum256(buf)
		times[i] = time.Since(start)
		buf[0] ^= sum[0] // each round's input differs: nothing to reuse
	}
	slices.Sort(times)
	return times[len(times)/2]
}
