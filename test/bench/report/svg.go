package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The pictures beside the table: line charts drawn as SVG by hand (the
// standard library has no plotting, and a chart of a few series needs no
// dependency). A picture is one or more charts stacked; each chart has
// axes with ticks, a grid, a legend and one line per series.

// Chart is one panel of a picture.
type Chart struct {
	Title          string
	XLabel, YLabel string
	// LogX puts x on a logarithmic scale: latencies whose tail is
	// decades away from their median.
	LogX   bool
	Series []Series
}

// Series is one line of a chart, drawn as steps: a distribution or a
// count over time.
type Series struct {
	Name string
	X, Y []float64
}

// maxSeriesPoints bounds the points drawn per series: a CDF of 2,000
// samples is drawn from 200 of its quantiles, which the eye cannot tell
// apart and which keeps the SVG small enough to commit.
const maxSeriesPoints = 200

// CDF is the empirical distribution of values: y is the fraction of the
// values at or below x.
func CDF(name string, values []float64) Series {
	s := Cumulative(name, values)
	n := float64(len(values))
	for i := range s.Y {
		s.Y[i] /= n
	}
	return s
}

// Cumulative is how many of the values are at or below x: with the times
// at which each of n VMs reached running, how many ran at each moment.
func Cumulative(name string, values []float64) Series {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	s := Series{Name: name}
	n := len(sorted)
	if n <= maxSeriesPoints {
		for i, v := range sorted {
			s.X, s.Y = append(s.X, v), append(s.Y, float64(i+1))
		}
		return s
	}
	for k := 1; k <= maxSeriesPoints; k++ { // the k/max quantiles, the largest included
		i := k*n/maxSeriesPoints - 1
		s.X, s.Y = append(s.X, sorted[i]), append(s.Y, float64(i+1))
	}
	return s
}

// The layout of one chart, in SVG user units.
const (
	svgWidth      = 760.0
	chartHeight   = 300.0
	marginLeft    = 70.0
	marginRight   = 35.0
	marginTop     = 30.0
	marginBottom  = 45.0
	legendRowStep = 16.0
)

// palette colours the series in order (colour-blind safe: Okabe–Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

// WriteSVG draws the charts one below the other.
func WriteSVG(w io.Writer, charts []Chart) error {
	bw := bufio.NewWriter(w)
	height := chartHeight * float64(max(1, len(charts)))
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, svgWidth, height, svgWidth, height)
	for i, c := range charts {
		fmt.Fprintf(bw, "<g class=\"chart\" transform=\"translate(0,%g)\">\n", float64(i)*chartHeight)
		drawChart(bw, c)
		bw.WriteString("</g>\n")
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// axis maps data to pixels along one dimension.
type axis struct {
	lo, hi     float64 // data range
	from, to   float64 // pixels
	log        bool
	ticks      []float64
	tickLabels []string
}

func (a axis) pos(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(math.Max(v, a.lo)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return a.from
	}
	return a.from + (v-lo)/(hi-lo)*(a.to-a.from)
}

func drawChart(w *bufio.Writer, c Chart) {
	x0, x1 := marginLeft, svgWidth-marginRight
	y0, y1 := chartHeight-marginBottom, marginTop // y grows downwards
	xs, ys := dataRange(c)
	xa := newAxis(xs[0], xs[1], x0, x1, c.LogX)
	ya := newAxis(math.Min(0, ys[0]), ys[1], y0, y1, false)
	fmt.Fprintf(w, "<text class=\"title\" x=\"%g\" y=\"%g\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n",
		(x0+x1)/2, marginTop-10, esc(c.Title))
	// Grid and ticks.
	w.WriteString("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">\n")
	for _, t := range xa.ticks {
		fmt.Fprintf(w, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\"/>\n", xa.pos(t), y0, xa.pos(t), y1)
	}
	for _, t := range ya.ticks {
		fmt.Fprintf(w, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\"/>\n", x0, ya.pos(t), x1, ya.pos(t))
	}
	w.WriteString("</g>\n")
	fmt.Fprintf(w, "<g class=\"axis x\">\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x1, y0)
	for i, t := range xa.ticks {
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", xa.pos(t), y0+15, esc(xa.tickLabels[i]))
	}
	fmt.Fprintf(w, "<text class=\"label\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n</g>\n", (x0+x1)/2, y0+35, esc(c.XLabel))
	fmt.Fprintf(w, "<g class=\"axis y\">\n<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, y0, x0, y1)
	for i, t := range ya.ticks {
		fmt.Fprintf(w, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0-6, ya.pos(t)+4, esc(ya.tickLabels[i]))
	}
	fmt.Fprintf(w, "<text class=\"label\" transform=\"translate(%g,%g) rotate(-90)\" text-anchor=\"middle\">%s</text>\n</g>\n",
		x0-50, (y0+y1)/2, esc(c.YLabel))
	// Series, then the legend in the lower right, where rising curves
	// leave room.
	for i, s := range c.Series {
		fmt.Fprintf(w, "<path class=\"series\" data-name=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"%s\"><title>%s</title></path>\n",
			esc(s.Name), palette[i%len(palette)], stepPath(s, xa, ya), esc(s.Name))
	}
	lx, ly := x1-170, y0-10-legendRowStep*float64(len(c.Series))
	fmt.Fprintf(w, "<g class=\"legend\">\n<rect x=\"%g\" y=\"%g\" width=\"165\" height=\"%g\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n",
		lx, ly-4, legendRowStep*float64(len(c.Series))+8)
	for i, s := range c.Series {
		y := ly + legendRowStep*float64(i) + 8
		fmt.Fprintf(w, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx+6, y, lx+26, y, palette[i%len(palette)])
		fmt.Fprintf(w, "<text x=\"%g\" y=\"%g\">%s</text>\n", lx+32, y+4, esc(s.Name))
	}
	w.WriteString("</g>\n")
}

// stepPath draws s as steps: y holds from one x to the next.
func stepPath(s Series, xa, ya axis) string {
	var d strings.Builder
	prevY := ya.pos(0)
	for i := range min(len(s.X), len(s.Y)) {
		if xa.log && s.X[i] <= 0 {
			continue
		}
		x, y := xa.pos(s.X[i]), ya.pos(s.Y[i])
		if d.Len() == 0 {
			fmt.Fprintf(&d, "M%.1f %.1f", x, prevY)
		} else {
			fmt.Fprintf(&d, "H%.1f", x)
		}
		fmt.Fprintf(&d, "V%.1f", y)
		prevY = y
	}
	return d.String()
}

// dataRange is the range of x and y over every series (x > 0 only on a
// log scale).
func dataRange(c Chart) (xs, ys [2]float64) {
	xs, ys = [2]float64{math.Inf(1), math.Inf(-1)}, [2]float64{math.Inf(1), math.Inf(-1)}
	for _, s := range c.Series {
		for i := range min(len(s.X), len(s.Y)) {
			if c.LogX && s.X[i] <= 0 || math.IsNaN(s.X[i]) || math.IsNaN(s.Y[i]) {
				continue
			}
			xs[0], xs[1] = math.Min(xs[0], s.X[i]), math.Max(xs[1], s.X[i])
			ys[0], ys[1] = math.Min(ys[0], s.Y[i]), math.Max(ys[1], s.Y[i])
		}
	}
	if math.IsInf(xs[0], 1) { // no points
		xs, ys = [2]float64{1, 10}, [2]float64{0, 1}
	}
	return xs, ys
}

// newAxis picks round bounds and ticks for the data range lo..hi: steps
// of 1, 2 or 5 times a power of ten, or decades (with 2 and 5 between
// them when there are few) on a log scale.
func newAxis(lo, hi, from, to float64, log bool) axis {
	a := axis{from: from, to: to, log: log}
	if log {
		// Bounds at 1, 2 or 5 times a power of ten around the data;
		// ticks there too when the range spans few decades, else at
		// the decades alone.
		a.lo, a.hi = niceLogBound(lo, false), niceLogBound(hi, true)
		if a.hi <= a.lo {
			a.hi = a.lo * 10
		}
		mults := []float64{1}
		if math.Log10(a.hi/a.lo) <= 3.5 {
			mults = []float64{1, 2, 5}
		}
		for e := math.Floor(math.Log10(a.lo)); e <= math.Ceil(math.Log10(a.hi)); e++ {
			for _, m := range mults {
				if t := m * math.Pow(10, e); t >= a.lo*0.9999 && t <= a.hi*1.0001 {
					a.ticks = append(a.ticks, t)
				}
			}
		}
	} else {
		if hi <= lo {
			hi = lo + 1
		}
		step := niceStep((hi - lo) / 5)
		a.lo, a.hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
		for t := a.lo; t <= a.hi+step/1000; t += step {
			a.ticks = append(a.ticks, math.Round(t/step)*step)
		}
	}
	for _, t := range a.ticks {
		unit := t // the tick's own magnitude on a log scale, the step's on a linear one
		if !log && len(a.ticks) > 1 {
			unit = a.ticks[1] - a.ticks[0]
		}
		decimals := 0
		if unit > 0 {
			decimals = max(0, -int(math.Floor(math.Log10(unit)+1e-9)))
		}
		a.tickLabels = append(a.tickLabels, strconv.FormatFloat(t, 'f', decimals, 64))
	}
	return a
}

// niceLogBound is the 1, 2 or 5 times a power of ten at or below v (at or
// above with up).
func niceLogBound(v float64, up bool) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	if up {
		for _, m := range []float64{1, 2, 5, 10} {
			if m*p >= v*0.9999 {
				return m * p
			}
		}
	}
	for _, m := range []float64{5, 2, 1} {
		if m*p <= v*1.0001 {
			return m * p
		}
	}
	return p
}

// niceStep is the 1, 2 or 5 times a power of ten at or above raw.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*0.999 {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
