package soak

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestWindowsFor(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want Windows
	}{
		{60 * time.Minute, Windows{Base: [2]time.Duration{10 * time.Minute, 20 * time.Minute}, Final: 50 * time.Minute}},
		{30 * time.Minute, Windows{Base: [2]time.Duration{10 * time.Minute, 20 * time.Minute}, Final: 20 * time.Minute}},
		{6 * time.Minute, Windows{Base: [2]time.Duration{2 * time.Minute, 4 * time.Minute}, Final: 4 * time.Minute, Scaled: true}},
	} {
		if got := WindowsFor(tc.d); got != tc.want {
			t.Errorf("WindowsFor(%v) = %+v, want %+v", tc.d, got, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %g, want %g", tc.in, got, tc.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %g, want NaN", got)
	}
}

// run makes a sample a minute for 60 minutes of one metric, its value
// at minute i given by f.
func run(f func(i int) float64) []Sample {
	var out []Sample
	for i := 0; i <= 60; i++ {
		out = append(out, Sample{At: time.Duration(i) * time.Minute, Process: 1 + i/4, Values: []float64{f(i)}})
	}
	return out
}

func TestCheck(t *testing.T) {
	w := WindowsFor(60 * time.Minute)
	rss := Metric{Key: "rss", Decimals: 1}
	fds := Metric{Key: "fds", Floor: 1}
	for _, tc := range []struct {
		name    string
		m       Metric
		samples []Sample
		ok      bool
		percent float64
	}{
		{"flat", rss, run(func(int) float64 { return 40 }), true, 0},
		{"grows before minute 10 only", rss, run(func(i int) float64 { return 20 + 2*float64(min(i, 10)) }), true, 0},
		// A restart every 4 minutes: the sample after each is low. The
		// medians do not see the sawtooth.
		{"sawtooth of restarts", rss, run(func(i int) float64 { return []float64{30, 40, 41, 42}[i%4] }), true, 0},
		{"4 % more", rss, run(func(i int) float64 { return 100 + 4*float64(i/50) }), true, 4},
		{"6 % more", rss, run(func(i int) float64 { return 100 + 6*float64(i/50) }), false, 6},
		// 5 % of 14 fds is 0.7: one more is within the floor, two are not.
		{"one fd more", fds, run(func(i int) float64 { return 14 + float64(i/50) }), true, 100.0 / 14},
		{"two fds more", fds, run(func(i int) float64 { return 14 + 2*float64(i/50) }), false, 200.0 / 14},
		{"no samples at the end", rss, run(func(i int) float64 {
			if i >= 50 {
				return math.NaN()
			}
			return 40
		}), false, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := Check([]Metric{tc.m}, tc.samples, w, 0.05)[0]
			if g.OK != tc.ok {
				t.Errorf("OK = %v, want %v (%+v)", g.OK, tc.ok, g)
			}
			if p := g.Percent(); math.Abs(p-tc.percent) > 0.01 && !(math.IsNaN(p) && math.IsNaN(tc.percent)) {
				t.Errorf("Percent() = %g, want %g", p, tc.percent)
			}
		})
	}
}

func TestCheckMax(t *testing.T) {
	// The largest value from the base window on; warm-up's own not counted.
	s := run(func(i int) float64 {
		switch i {
		case 5:
			return 99
		case 33:
			return 50
		}
		return 40
	})
	if g := Check([]Metric{{Key: "rss"}}, s, WindowsFor(time.Hour), 0.05)[0]; g.Max != 50 {
		t.Errorf("Max = %g, want 50", g.Max)
	}
}

func TestWriteSamples(t *testing.T) {
	metrics := []Metric{{Key: "rss", Title: "RSS (MiB)", Decimals: 1}, {Key: "fds", Title: "open fds"}}
	samples := []Sample{
		{At: 90 * time.Second, Process: 1, Age: 95 * time.Second, Values: []float64{41.26, 17}},
		{At: 150 * time.Second, Process: 2, Age: 20 * time.Second, Values: []float64{math.NaN(), 15}},
	}
	var b bytes.Buffer
	if err := WriteSamples(&b, metrics, samples); err != nil {
		t.Fatal(err)
	}
	want := "| minute | crimux process | its age | RSS (MiB) | open fds |\n" +
		"|---:|---:|---:|---:|---:|\n" +
		"| 1.5 | 1 | 1m35s | 41.3 | 17 |\n" +
		"| 2.5 | 2 | 20s | — | 15 |\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteGrowthAndLine(t *testing.T) {
	m := Metric{Key: "fds", Title: "open fds", Floor: 1}
	g := Check([]Metric{m}, run(func(i int) float64 { return 14 + 2*float64(i/50) }), WindowsFor(time.Hour), 0.05)
	var b bytes.Buffer
	if err := WriteGrowth(&b, g, WindowsFor(time.Hour), 0.05); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"minutes 10–20", "minutes 50–end", "| open fds | 14 (10) | 16 (11) | +14.3 % | +1.0 | 16 | **no** |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("growth table lacks %q:\n%s", want, b.String())
		}
	}
	if got, want := g[0].Line(), "SOAK fds base 14 final 16 growth +14.3 % allowed +1.0 GROWS"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}

func TestWriteSVG(t *testing.T) {
	metrics := []Metric{{Key: "rss", Title: "RSS <MiB>", Decimals: 1}, {Key: "fds", Title: "open fds", Floor: 1}}
	samples := run(func(i int) float64 { return 40 + float64(i%4) })
	for i := range samples {
		samples[i].Values = append(samples[i].Values, 14)
	}
	samples[30].Values[1] = math.NaN() // a sample that could not be read breaks its line
	w := WindowsFor(time.Hour)
	p := Plot{Title: "soak", Metrics: metrics, Samples: samples, Windows: w, Growth: Check(metrics, samples, w, 0.05),
		Kills: []time.Duration{4 * time.Minute, 8 * time.Minute, 12 * time.Minute}, Limit: 0.05}
	var b bytes.Buffer
	if err := WriteSVG(&b, p); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one group per metric with its polylines, one line
	// per kill, both windows.
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	counts := map[string]int{}
	var metric string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v\n%s", err, b.String())
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case se.Name.Local == "g" && attr["class"] == "metric":
			metric = attr["data-name"]
			counts["metric"]++
		case se.Name.Local == "polyline":
			counts["polyline "+metric]++
			if metric == "rss" && len(strings.Fields(attr["points"])) != len(samples) {
				t.Errorf("rss polyline has %d points, want %d", len(strings.Fields(attr["points"])), len(samples))
			}
		case attr["class"] == "kill":
			counts["kill"]++
		case attr["class"] == "window":
			counts["window"]++
		}
	}
	want := map[string]int{"metric": 2, "polyline rss": 1, "polyline fds": 2, "kill": 3, "window": 2}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	if !strings.Contains(b.String(), "RSS &lt;MiB&gt;") {
		t.Error("a title with < and > is not escaped")
	}
}

func TestLinearAxis(t *testing.T) {
	a := linear(0.93, 1.12, 0, 100)
	if a.lo > 0.93 || a.hi < 1.12 || len(a.ticks) < 4 || len(a.ticks) > 10 {
		t.Errorf("axis over 0.93..1.12: lo %g hi %g ticks %v", a.lo, a.hi, a.ticks)
	}
	if got := a.label(1); got != "1.00" && got != "1.0" {
		t.Errorf("label(1) = %q", got)
	}
	if a.pos(a.lo) != 0 || a.pos(a.hi) != 100 {
		t.Errorf("pos maps %g..%g to %g..%g", a.lo, a.hi, a.pos(a.lo), a.pos(a.hi))
	}
}
