// Package loadgen owns the load phase's machinery that knows nothing of
// CRI: workers that repeat a call at a pace until told to stop, the
// latencies they record, how many of them are in a call at once, and the
// tally of their outcomes by kind.
package loadgen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/crimux/crimux/test/bench/stats"
)

// Start runs n workers, each calling call(worker) again and again until
// stop is closed; a call in progress then finishes. A worker starts a
// call every period (at once when the last took longer; back to back
// with period 0), worker i first after i*spread/n, so that the workers'
// first calls spread out instead of arriving together. wait returns once
// every worker has ended.
func Start(stop <-chan struct{}, n int, period, spread time.Duration, call func(worker int)) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(spread * time.Duration(i) / time.Duration(max(n, 1)))
			for {
				if !sleepUntil(stop, next) {
					return
				}
				next = time.Now().Add(period)
				call(i)
			}
		}()
	}
	return wg.Wait
}

// sleepUntil waits until t; false if stop closed first (or was closed).
func sleepUntil(stop <-chan struct{}, t time.Time) bool {
	select {
	case <-stop:
		return false
	default:
	}
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-stop:
		return false
	case <-timer.C:
		return true
	}
}

// Latencies collect the durations of one kind of call from many
// goroutines.
type Latencies struct {
	mu sync.Mutex
	s  stats.Samples
}

// Add records one call's duration.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s = append(l.s, d)
}

// Samples are the durations recorded so far.
func (l *Latencies) Samples() stats.Samples {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(stats.Samples(nil), l.s...)
}

// Gauge counts calls in flight and remembers the most there were at once.
type Gauge struct {
	mu        sync.Mutex
	now, peak int
}

// Enter counts a call in; the function it returns counts it out.
func (g *Gauge) Enter() (leave func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now++
	g.peak = max(g.peak, g.now)
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.now--
	}
}

// Peak is the most calls there were in flight at once.
func (g *Gauge) Peak() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
}

// OK is the kind of a call that did what was asked.
const OK = "ok"

// Outcomes tally calls by kind: OK, or what went wrong.
type Outcomes struct {
	mu    sync.Mutex
	count map[string]int
	first map[string]string // the first error of each kind, for the report
}

// Add counts one call of the given kind; err (nil for OK) is kept if it
// is the kind's first.
func (o *Outcomes) Add(kind string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.count == nil {
		o.count, o.first = map[string]int{}, map[string]string{}
	}
	o.count[kind]++
	if _, seen := o.first[kind]; !seen && err != nil {
		o.first[kind] = shorten(err.Error(), 300)
	}
}

// Count is how many calls of kind there were.
func (o *Outcomes) Count(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count[kind]
}

// Errors is how many calls were not OK.
func (o *Outcomes) Errors() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for k, c := range o.count {
		if k != OK {
			n += c
		}
	}
	return n
}

// String is every kind with its count, most frequent first, and the
// first error of each kind that is not OK.
func (o *Outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	kinds := slices.Collect(maps.Keys(o.count))
	slices.SortFunc(kinds, func(a, b string) int {
		if c := cmp.Compare(o.count[b], o.count[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(kinds) == 0 {
		return "no calls"
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, o.count[k])
		if e, ok := o.first[k]; ok {
			parts[i] += fmt.Sprintf(" (first: %s)", e)
		}
	}
	return strings.Join(parts, ", ")
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// Kind is what err is, as the tally counts it: OK for nil, the gRPC code
// of a status error (ResourceExhausted, DeadlineExceeded, …), the
// context's error, else "other".
func Kind(err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return "other"
}

// Spans collect the spans of time that calls took, from many goroutines,
// to tell how many ran at once.
type Spans struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

// Add records a call that ran from start to end.
func (s *Spans) Add(start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, [2]time.Time{start, end})
}

// Mean is how many calls ran at once between from and to, on average
// over that time: the time the spans spent in it over its length.
func (s *Spans) Mean(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !to.After(from) {
		return 0
	}
	var in time.Duration
	for _, sp := range s.spans {
		if d := minTime(sp[1], to).Sub(maxTime(sp[0], from)); d > 0 {
			in += d
		}
	}
	return float64(in) / float64(to.Sub(from))
}

// Peak is the most spans that overlapped at one moment (a span ending
// when another starts does not overlap it).
func (s *Spans) Peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(s.spans))
	for _, sp := range s.spans {
		edges = append(edges, edge{sp[0], 1}, edge{sp[1], -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta) // ends before starts
	})
	now, peak := 0, 0
	for _, e := range edges {
		now += e.delta
		peak = max(peak, now)
	}
	return peak
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MarshalJSON writes the durations recorded so far, in nanoseconds: the
// load phase's probe sends them from its process to the bench's.
func (l *Latencies) MarshalJSON() ([]byte, error) {
	return json.Marshal([]time.Duration(l.Samples()))
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Latencies) UnmarshalJSON(data []byte) error {
	var d []time.Duration
	if err := json.Unmarshal(data, &d); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s = stats.Samples(d)
	return nil
}

// outcomesJSON is the tally as JSON: counts and first errors by kind.
type outcomesJSON struct {
	Count map[string]int    `json:"count"`
	First map[string]string `json:"first"`
}

// MarshalJSON writes the tally.
func (o *Outcomes) MarshalJSON() ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return json.Marshal(outcomesJSON{Count: o.count, First: o.first})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (o *Outcomes) UnmarshalJSON(data []byte) error {
	var j outcomesJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count, o.first = j.Count, j.First
	return nil
}
