package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, OK},
		{status.Error(codes.ResourceExhausted, "cap"), "ResourceExhausted"},
		{fmt.Errorf("exec: %w", status.Error(codes.FailedPrecondition, "no agent")), "FailedPrecondition"},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), "DeadlineExceeded"},
		{context.Canceled, "Canceled"},
		{errors.New("wrong output"), "other"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := Kind(tc.err); got != tc.want {
				t.Errorf("Kind(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	var o Outcomes
	if o.String() != "no calls" || o.Errors() != 0 {
		t.Fatalf("empty: %q, %d errors", o.String(), o.Errors())
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case i < 6:
				o.Add(OK, nil)
			case i < 8:
				o.Add("ResourceExhausted", fmt.Errorf("refused %d", i))
			default:
				o.Add("other", errors.New(strings.Repeat("x", 400)))
			}
		}()
	}
	wg.Wait()
	if o.Count(OK) != 6 || o.Errors() != 4 {
		t.Errorf("ok %d, errors %d; want 6 and 4", o.Count(OK), o.Errors())
	}
	s := o.String()
	if !strings.HasPrefix(s, "ok 6, ResourceExhausted 2 (first: refused ") || !strings.Contains(s, ", other 2 (first: xxx") {
		t.Errorf("String() = %q", s)
	}
	if !strings.HasSuffix(s, "x…)") || len(s) > 450 {
		t.Errorf("String() keeps %d bytes; want the long error cut", len(s))
	}
}

func TestGauge(t *testing.T) {
	var g Gauge
	a, b := g.Enter(), g.Enter()
	a()
	c := g.Enter()
	b()
	c()
	g.Enter()()
	if g.Peak() != 2 {
		t.Errorf("peak %d, want 2", g.Peak())
	}
}

// TestStartPacesAndStops: each worker calls once per period, the workers
// spread over it, and stop ends them after the call in progress.
func TestStartPacesAndStops(t *testing.T) {
	const workers, period = 4, 40 * time.Millisecond
	stop := make(chan struct{})
	var mu sync.Mutex
	calls := make([][]time.Time, workers)
	t0 := time.Now()
	wait := Start(stop, workers, period, period, func(w int) {
		mu.Lock()
		calls[w] = append(calls[w], time.Now())
		mu.Unlock()
	})
	time.Sleep(5*period + period/2)
	close(stop)
	wait()
	for w, ts := range calls {
		// 5 or 6 periods fit (the first call comes after w/4 of one).
		if len(ts) < 4 || len(ts) > 7 {
			t.Errorf("worker %d called %d times in 5.5 periods", w, len(ts))
		}
		if first := ts[0].Sub(t0); first < period*time.Duration(w)/workers {
			t.Errorf("worker %d started after %v, before its offset", w, first)
		}
	}
	mu.Lock()
	n := len(calls[0])
	mu.Unlock()
	time.Sleep(2 * period)
	if len(calls[0]) != n {
		t.Errorf("worker 0 called again after stop")
	}
}

// TestStartBackToBack: period 0 calls again at once; a stopped Start
// makes no call at all.
func TestStartBackToBack(t *testing.T) {
	stop := make(chan struct{})
	var mu sync.Mutex
	n := 0
	wait := Start(stop, 1, 0, time.Second, func(int) {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 100 {
			close(stop)
		}
	})
	wait()
	if n != 100 {
		t.Errorf("%d calls, want 100", n)
	}
	closed := make(chan struct{})
	close(closed)
	Start(closed, 3, time.Millisecond, 0, func(int) { t.Error("called after stop") })()
}

func TestSpans(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var s Spans
	for _, sp := range [][2]float64{{0, 2}, {1, 3}, {2, 4}, {2.5, 3.5}, {9, 12}} {
		s.Add(at(sp[0]), at(sp[1]))
	}
	for _, tc := range []struct {
		from, to, want float64
	}{
		{0, 4, 7.0 / 4},   // 2+2+2+1 s of spans in 4 s
		{1, 3, 4.5 / 2},   // 1+2+1+0.5 s in 2 s
		{10, 11, 1},       // inside the last span
		{5, 8, 0},         // none
		{3, 3, 0},         // an empty window
		{11, 20, 1.0 / 9}, // the last span's end
	} {
		if got := s.Mean(at(tc.from), at(tc.to)); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("Mean(%g, %g) = %g, want %g", tc.from, tc.to, got, tc.want)
		}
	}
	if p := s.Peak(); p != 3 { // 1-3, 2-4 and 2.5-3.5 at 2.5 (0-2 ends as 2-4 starts)
		t.Errorf("Peak() = %d, want 3", p)
	}
	var empty Spans
	if empty.Peak() != 0 || empty.Mean(t0, at(1)) != 0 {
		t.Error("empty spans")
	}
}

// The probe's process sends its latencies and tally as JSON: what arrives
// is what was recorded.
func TestJSONRoundTrip(t *testing.T) {
	var l Latencies
	l.Add(3 * time.Millisecond)
	l.Add(1500 * time.Microsecond)
	var o Outcomes
	o.Add(OK, nil)
	o.Add("Unavailable", errors.New("crimux went away"))
	data, err := json.Marshal(struct {
		L *Latencies
		O *Outcomes
	}{&l, &o})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		L *Latencies
		O *Outcomes
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.L.Samples(); len(got) != 2 || got[0] != 3*time.Millisecond || got[1] != 1500*time.Microsecond {
		t.Errorf("latencies back: %v", got)
	}
	if back.O.String() != o.String() || back.O.Errors() != 1 {
		t.Errorf("outcomes back: %q, want %q", back.O.String(), o.String())
	}
}
