package soak

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// The plot: each metric drawn as a polyline of its samples divided by
// its base median, so all share one axis around 1.0 and growth shows as
// a line leaving the band of the limit. Plain SVG written by hand, as the
// bench's pictures are (test/bench/report): a few lines need no plotting
// dependency.

// Plot is what WriteSVG draws.
type Plot struct {
	Title   string
	Metrics []Metric
	Samples []Sample
	Windows Windows
	// Growth is Check's verdict: its Base medians normalise the lines.
	Growth []Growth
	// Kills are when crimux was SIGKILLed.
	Kills []time.Duration
	// Limit is the growth allowed (0.05), drawn as a band around 1.
	Limit float64
}

// The layout, in SVG user units.
const (
	plotWidth   = 760.0
	plotLeft    = 60.0
	plotRight   = 20.0
	plotTop     = 40.0
	plotInner   = 300.0 // the plot area's height
	legendStep  = 16.0
	maxRatioTop = 3.0 // a line above this is drawn at the edge
)

// palette colours the metrics in order (colour-blind safe: Okabe–Ito, as
// the bench's pictures).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00", "#56B4E9"}

// WriteSVG draws the plot.
func WriteSVG(w io.Writer, p Plot) error {
	bw := bufio.NewWriter(w)
	height := plotTop + plotInner + 50 + legendStep*float64(len(p.Metrics)) + 10
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, plotWidth, height, plotWidth, height)
	x0, x1 := plotLeft, plotWidth-plotRight
	y0, y1 := plotTop+plotInner, plotTop
	ratios := normalised(p)
	xa := linear(0, xEnd(p), x0, x1)
	xa.hi = xEnd(p) // the axis ends where the run did, its ticks within
	for len(xa.ticks) > 1 && xa.ticks[len(xa.ticks)-1] > xa.hi {
		xa.ticks = xa.ticks[:len(xa.ticks)-1]
	}
	ylo, yhi := yRange(ratios, p.Limit)
	ya := linear(ylo, yhi, y0, y1)
	fmt.Fprintf(bw, "<text class=\"title\" x=\"%g\" y=\"%g\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", (x0+x1)/2, plotTop-16, esc(p.Title))
	// The windows compared, the band of the limit, the kills.
	for _, win := range []struct {
		name, fill string
		from, to   time.Duration
	}{
		{"base", "#e8eef8", p.Windows.Base[0], p.Windows.Base[1]},
		{"final", "#f8eee4", p.Windows.Final, time.Duration(xa.hi * float64(time.Minute))},
	} {
		fx, tx := xa.pos(win.from.Minutes()), xa.pos(win.to.Minutes())
		fmt.Fprintf(bw, "<rect class=\"window\" data-name=\"%s\" x=\"%.1f\" y=\"%g\" width=\"%.1f\" height=\"%g\" fill=\"%s\"/>\n", win.name, fx, y1, math.Max(0, tx-fx), plotInner, win.fill)
		fmt.Fprintf(bw, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n", (fx+tx)/2, y1+12, win.name)
	}
	lo, hi := ya.pos(1-p.Limit), ya.pos(1+p.Limit)
	fmt.Fprintf(bw, "<rect class=\"limit\" x=\"%g\" y=\"%.1f\" width=\"%g\" height=\"%.1f\" fill=\"#dff0d8\" fill-opacity=\"0.8\"/>\n", x0, hi, x1-x0, lo-hi)
	fmt.Fprintf(bw, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#7a7\" stroke-width=\"1\"/>\n", x0, ya.pos(1), x1, ya.pos(1))
	for _, k := range p.Kills {
		x := xa.pos(k.Minutes())
		fmt.Fprintf(bw, "<line class=\"kill\" x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#c00\" stroke-width=\"1\" stroke-dasharray=\"3,3\"><title>crimux SIGKILLed at minute %.1f</title></line>\n",
			x, y0, x, y1, k.Minutes())
	}
	drawAxes(bw, xa, ya, x0, x1, y0, y1)
	for i, m := range p.Metrics {
		fmt.Fprintf(bw, "<g class=\"metric\" data-name=\"%s\" stroke=\"%s\" fill=\"%s\">\n", esc(m.Key), palette[i%len(palette)], palette[i%len(palette)])
		for _, line := range polylines(ratios[i], p.Samples, xa, ya) {
			fmt.Fprintf(bw, "<polyline fill=\"none\" stroke-width=\"1.5\" points=\"%s\"/>\n", line)
			for _, pt := range strings.Fields(line) {
				x, y, _ := strings.Cut(pt, ",")
				fmt.Fprintf(bw, "<circle cx=\"%s\" cy=\"%s\" r=\"2\" stroke=\"none\"/>\n", x, y)
			}
		}
		bw.WriteString("</g>\n")
	}
	drawLegend(bw, p, y0+48)
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// normalised is each metric's samples over its base median (or, without
// one, its first positive sample): 1.0 is the base.
func normalised(p Plot) [][]float64 {
	out := make([][]float64, len(p.Metrics))
	for i := range p.Metrics {
		ref := math.NaN()
		if i < len(p.Growth) {
			ref = p.Growth[i].Base
		}
		for _, s := range p.Samples {
			if !(ref > 0) && s.Values[i] > 0 {
				ref = s.Values[i]
			}
		}
		out[i] = make([]float64, len(p.Samples))
		for j, s := range p.Samples {
			out[i][j] = s.Values[i] / ref // NaN stays NaN; so does everything without a reference
		}
	}
	return out
}

// xEnd is the x axis's end, in minutes: the last sample or kill.
func xEnd(p Plot) float64 {
	end := p.Windows.Final.Minutes()
	for _, s := range p.Samples {
		end = math.Max(end, s.At.Minutes())
	}
	for _, k := range p.Kills {
		end = math.Max(end, k.Minutes())
	}
	return math.Max(end, 1)
}

// yRange spans every ratio and the band, within 0..maxRatioTop.
func yRange(ratios [][]float64, limit float64) (lo, hi float64) {
	lo, hi = 1-2*limit, 1+2*limit
	for _, r := range ratios {
		for _, v := range r {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	return math.Max(0, lo), math.Min(maxRatioTop, hi)
}

// polylines are the points of one metric, broken where a sample is
// missing (NaN).
func polylines(ratios []float64, samples []Sample, xa, ya axis) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for j, v := range ratios {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			flush()
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		v = math.Max(ya.lo, math.Min(ya.hi, v))
		fmt.Fprintf(&cur, "%.1f,%.1f", xa.pos(samples[j].At.Minutes()), ya.pos(v))
	}
	flush()
	return out
}

func drawAxes(w *bufio.Writer, xa, ya axis, x0, x1, y0, y1 float64) {
	w.WriteString("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">\n")
	for _, t := range ya.ticks {
		fmt.Fprintf(w, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\"/>\n", x0, ya.pos(t), x1, ya.pos(t))
	}
	w.WriteString("</g>\n")
	fmt.Fprintf(w, "<g class=\"axis x\">\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x1, y0)
	for _, t := range xa.ticks {
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", xa.pos(t), y0+15, xa.label(t))
	}
	fmt.Fprintf(w, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">minutes since the churn began (dashed: crimux SIGKILLed)</text>\n</g>\n", (x0+x1)/2, y0+32)
	fmt.Fprintf(w, "<g class=\"axis y\">\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0, y1)
	for _, t := range ya.ticks {
		fmt.Fprintf(w, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0-6, ya.pos(t)+4, ya.label(t))
	}
	fmt.Fprintf(w, "<text transform=\"translate(%g,%g) rotate(-90)\" text-anchor=\"middle\">÷ base median</text>\n</g>\n", x0-42, (y0+y1)/2)
}

func drawLegend(w *bufio.Writer, p Plot, top float64) {
	w.WriteString("<g class=\"legend\">\n")
	for i, m := range p.Metrics {
		y := top + legendStep*float64(i)
		label := m.Title
		if i < len(p.Growth) {
			g := p.Growth[i]
			label += fmt.Sprintf(": %s → %s, %s", formatValue(g.Base, g.Decimals), formatValue(g.Final, g.Decimals), formatPercent(g.Percent()))
		}
		fmt.Fprintf(w, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>\n", plotLeft, y, plotLeft+20, y, palette[i%len(palette)])
		fmt.Fprintf(w, "<text x=\"%g\" y=\"%g\">%s</text>\n", plotLeft+26, y+4, esc(label))
	}
	w.WriteString("</g>\n")
}

// axis maps data to pixels along one dimension, with round ticks.
type axis struct {
	lo, hi, from, to float64
	ticks            []float64
	step             float64
}

// linear is an axis over lo..hi widened to round ticks (1, 2 or 5 times a
// power of ten; about six of them).
func linear(lo, hi, from, to float64) axis {
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 6)
	a := axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step, from: from, to: to, step: step}
	for t := a.lo; t <= a.hi+step/1000; t += step {
		a.ticks = append(a.ticks, math.Round(t/step)*step)
	}
	return a
}

func (a axis) pos(v float64) float64 {
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

func (a axis) label(v float64) string {
	decimals := max(0, -int(math.Floor(math.Log10(a.step)+1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// niceStep is the 1, 2 or 5 times a power of ten at or above raw.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw*0.999 {
			return m * p
		}
	}
	return 10 * p
}

// esc makes text safe inside SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
