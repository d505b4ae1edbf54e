package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// samples are the durations of one kind of call on one path.
type samples []time.Duration

// quantile is the nearest-rank quantile q (0 < q ≤ 1); 0 for no samples.
func (s samples) quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (s samples) median() time.Duration { return s.quantile(0.5) }

// summary is "p50 X, p99 Y (n)" in the unit that reads best.
func (s samples) summary(quantiles ...float64) string {
	if len(s) == 0 {
		return "no samples"
	}
	out := ""
	for _, q := range quantiles {
		out += fmt.Sprintf("p%g %s, ", q*100, human(s.quantile(q)))
	}
	return fmt.Sprintf("%sn=%d", out, len(s))
}

// human prints a duration with three significant digits.
func human(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", us(d))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", ms(d))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, NaN when b is zero.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// medianDiff is the median of the pairwise differences a[i]-b[i] (rounds
// run side by side, so each pair shares the host's state of the moment).
func medianDiff(a, b samples) time.Duration {
	n := min(len(a), len(b))
	diffs := make(samples, n)
	for i := range n {
		diffs[i] = a[i] - b[i]
	}
	return diffs.median()
}

// medianRatio is the median of the pairwise ratios a[i]/b[i] (rounds run
// side by side), NaN without pairs.
func medianRatio(a, b samples) float64 {
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

// path is one side of a comparison.
type path int

const (
	direct path = iota
	viaCrimux
)

func (p path) String() string {
	if p == direct {
		return "direct"
	}
	return "crimux"
}

// alternate measures call on both paths, n times each, in blocks of
// block calls that take turns (direct first, then crimux first, …) so
// that drift in the host's load lands on both sides alike.
func alternate(n, block int, call func(path) (time.Duration, error)) (d, c samples, err error) {
	block = max(1, block)
	for done, turn := 0, 0; done < n; turn++ {
		k := min(block, n-done)
		order := []path{direct, viaCrimux}
		if turn%2 == 1 {
			order = []path{viaCrimux, direct}
		}
		for _, p := range order {
			for range k {
				t, err := call(p)
				if err != nil {
					return d, c, fmt.Errorf("%s: %w", p, err)
				}
				if p == direct {
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

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}
