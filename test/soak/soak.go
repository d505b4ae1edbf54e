// Package soak owns the figures of the hour of churn (TestSoak in
// test/e2e): the samples of crimux taken each minute, the check that none
// of them grows once warmed up, and their table and plot for
// docs/bench/. It does no I/O of its own but the writers it is
// given.
package soak

import (
	"math"
	"slices"
	"time"
)

// Metric is one quantity sampled from crimux each minute.
type Metric struct {
	// Key names the metric in the printed SOAK lines ("rss_mib").
	Key string
	// Title is its column heading and legend entry ("RSS (MiB)").
	Title string
	// Decimals is how many the table prints.
	Decimals int
	// Floor is growth always allowed, in the metric's unit: 1 for the
	// small counts (open fds, libvirt connections), where 5 % of 14 is
	// less than one and a count can only step by whole ones.
	Floor float64
}

// Sample is what one sampling found.
type Sample struct {
	// At is when, since the churn began.
	At time.Duration
	// Process is which crimux process was sampled: 1 for the first, one
	// more after each kill.
	Process int
	// Age is how long that process had run.
	Age time.Duration
	// Values are the metrics' values, in the metrics' order; NaN where
	// one could not be read.
	Values []float64
}

// Windows are the two stretches of a run whose medians are compared.
// Final is open-ended: a sample taken as the churn ends belongs to it.
type Windows struct {
	Base  [2]time.Duration // [from, to)
	Final time.Duration    // from here on
	// Scaled: the run was too short for 10-minute windows, and its
	// thirds were used (the first skipped as warm-up).
	Scaled bool
}

// WarmUp is how long a run warms up before its growth counts; it is also
// each window's length.
const WarmUp = 10 * time.Minute

// WindowsFor places the windows in a run of length d: the 10 minutes
// after the first 10 (the base), and the last 10. A run shorter than 30
// minutes has no room for those, and compares its second third with its
// last third instead.
func WindowsFor(d time.Duration) Windows {
	if d >= 3*WarmUp {
		return Windows{Base: [2]time.Duration{WarmUp, 2 * WarmUp}, Final: d - WarmUp}
	}
	third := d / 3
	return Windows{Base: [2]time.Duration{third, 2 * third}, Final: d - third, Scaled: true}
}

// inBase and inFinal say whether a sample at at is in a window.
func (w Windows) inBase(at time.Duration) bool  { return at >= w.Base[0] && at < w.Base[1] }
func (w Windows) inFinal(at time.Duration) bool { return at >= w.Final }

// Growth is one metric's verdict.
type Growth struct {
	Metric
	// Base and Final are the medians of the samples in each window;
	// NBase and NFinal how many samples each had.
	Base, Final   float64
	NBase, NFinal int
	// Max is the largest value after the warm-up (the base window on).
	Max float64
	// Allowed is how far Final may exceed Base: the limit's share of
	// Base, or Floor where that is more.
	Allowed float64
	OK      bool
}

// Percent is Final's growth over Base, in percent (NaN without both).
func (g Growth) Percent() float64 {
	if g.Base == 0 || math.IsNaN(g.Base) || math.IsNaN(g.Final) {
		return math.NaN()
	}
	return (g.Final/g.Base - 1) * 100
}

// Check compares, for each metric, the median of its samples in the
// final window with the median in the base window: more than limit (0.05
// for 5 %) above it, and more than the metric's Floor, is growth; a
// window without a sample fails too.
//
// Medians and not single samples: crimux is SIGKILLed every few minutes,
// so a sample may come from a process a minute old or five minutes old,
// and one taken just after a restart is smaller than one before it. The
// median of ten such samples is the typical process of those ten
// minutes, which a leak shifts and a restart's timing does not.
func Check(metrics []Metric, samples []Sample, w Windows, limit float64) []Growth {
	out := make([]Growth, len(metrics))
	for i, m := range metrics {
		var base, final []float64
		peak := math.NaN()
		for _, s := range samples {
			v := s.Values[i]
			if math.IsNaN(v) {
				continue
			}
			if s.At >= w.Base[0] && (math.IsNaN(peak) || v > peak) {
				peak = v
			}
			if w.inBase(s.At) {
				base = append(base, v)
			}
			if w.inFinal(s.At) {
				final = append(final, v)
			}
		}
		g := Growth{Metric: m, Base: Median(base), Final: Median(final), NBase: len(base), NFinal: len(final), Max: peak}
		g.Allowed = math.Max(limit*g.Base, m.Floor)
		g.OK = len(base) > 0 && len(final) > 0 && g.Final-g.Base <= g.Allowed
		out[i] = g
	}
	return out
}

// Median of values; NaN for none.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
