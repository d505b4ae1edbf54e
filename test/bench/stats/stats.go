// Package stats owns the bench's arithmetic on timings: samples and their
// nearest-rank quantiles, medians of pairwise differences and ratios, how
// a duration is printed, and the schedule that measures the two paths
// (direct and through crimux) in alternating blocks.
package stats

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Samples are the durations of one kind of call on one path.
type Samples []time.Duration

// Quantile is the nearest-rank quantile q (0 < q ≤ 1); 0 for no samples.
func (s Samples) Quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Median is the nearest-rank median.
func (s Samples) Median() time.Duration { return s.Quantile(0.5) }

// Summary is "p50 X, p99 Y (n)" in the unit that reads best.
func (s Samples) Summary(quantiles ...float64) string {
	if len(s) == 0 {
		return "no samples"
	}
	out := ""
	for _, q := range quantiles {
		out += fmt.Sprintf("p%g %s, ", q*100, Human(s.Quantile(q)))
	}
	return fmt.Sprintf("%sn=%d", out, len(s))
}

// Human prints a duration with three significant digits.
func Human(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", Micros(d))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", Millis(d))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Micros is d in microseconds.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Ratio is a/b, NaN when b is zero.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// MedianDiff is the median of the pairwise differences a[i]-b[i] (rounds
// run side by side, so each pair shares the host's state of the moment).
func MedianDiff(a, b Samples) time.Duration {
	n := min(len(a), len(b))
	diffs := make(Samples, n)
	for i := range n {
		diffs[i] = a[i] - b[i]
	}
	return diffs.Median()
}

// MedianRatio is the median of the pairwise ratios a[i]/b[i] (rounds run
// side by side), NaN without pairs.
func MedianRatio(a, b Samples) float64 {
	var ratios []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			ratios = append(ratios, float64(a[i])/float64(b[i]))
		}
	}
	if len(ratios) == 0 {
		return math.NaN()
	}
	slices.Sort(ratios)
	return ratios[(len(ratios)+1)/2-1]
}

// Path is one side of a comparison.
type Path int

// The sides: containerd's socket or libvirt directly, crimux, and the
// raw forwarder in front of containerd (test/bench/rawproxy: the cost of
// the hop alone).
const (
	Direct Path = iota
	ViaCrimux
	RawProxy
)

func (p Path) String() string {
	switch p {
	case Direct:
		return "direct"
	case RawProxy:
		return "rawproxy"
	}
	return "crimux"
}

// Alternate measures call on both paths, n times each, in blocks of
// block calls that take turns (direct first, then crimux first, …) so
// that drift in the host's load lands on both sides alike.
func Alternate(n, block int, call func(Path) (time.Duration, error)) (d, c Samples, err error) {
	block = max(1, block)
	for done, turn := 0, 0; done < n; turn++ {
		k := min(block, n-done)
		order := []Path{Direct, ViaCrimux}
		if turn%2 == 1 {
			order = []Path{ViaCrimux, Direct}
		}
		for _, p := range order {
			for range k {
				t, err := call(p)
				if err != nil {
					return d, c, fmt.Errorf("%s: %w", p, err)
				}
				if p == Direct {
					d = append(d, t)
				} else {
					c = append(c, t)
				}
			}
		}
		done += k
	}
	return d, c, nil
}

// Timed runs f and returns how long it took.
func Timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}
