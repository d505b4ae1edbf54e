package report

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgElement is what the tests look for in a picture.
type svgElement struct {
	name  string
	attrs map[string]string
}

// parseSVG checks the document is well-formed XML and returns its elements.
func parseSVG(t *testing.T, doc []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []svgElement
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			e := svgElement{name: se.Name.Local, attrs: map[string]string{}}
			for _, a := range se.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		}
	}
}

func count(els []svgElement, name, class string) (n int, names []string) {
	for _, e := range els {
		if f := strings.Fields(e.attrs["class"]); e.name == name && len(f) > 0 && f[0] == class {
			n++
			names = append(names, e.attrs["data-name"])
		}
	}
	return n, names
}

func TestWriteSVG(t *testing.T) {
	lat := func(base float64, n int) []float64 {
		var v []float64
		for i := range n {
			v = append(v, base*(1+math.Pow(float64(i)/float64(n), 8)*20))
		}
		return v
	}
	tests := []struct {
		name   string
		charts []Chart
		series []string
	}{
		{"latency CDFs, log x", []Chart{{
			Title: "ContainerStatus <one container> & more", XLabel: "latency (µs)", YLabel: "fraction of calls", LogX: true,
			Series: []Series{CDF("direct", lat(150, 2000)), CDF("crimux", lat(300, 2000)), CDF("rawproxy", lat(250, 2000))},
		}}, []string{"direct", "crimux", "rawproxy"}},
		{"two charts, linear, a count over time", []Chart{
			{Title: "a", XLabel: "s", YLabel: "VMs running", Series: []Series{Cumulative("crimux", []float64{3, 1, 2, 7.5})}},
			{Title: "b", XLabel: "s", YLabel: "n", Series: []Series{Cumulative("direct", []float64{0.2}), Cumulative("crimux", nil)}},
		}, []string{"crimux", "direct", "crimux"}},
		{"no series at all", []Chart{{Title: "empty"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteSVG(&buf, tc.charts); err != nil {
				t.Fatal(err)
			}
			els := parseSVG(t, buf.Bytes())
			if els[0].name != "svg" || els[0].attrs["viewBox"] == "" {
				t.Errorf("root = %+v, want an svg with a viewBox", els[0])
			}
			if n, _ := count(els, "g", "chart"); n != len(tc.charts) {
				t.Errorf("%d charts drawn, want %d", n, len(tc.charts))
			}
			if n, _ := count(els, "g", "axis"); n != 2*len(tc.charts) {
				t.Errorf("%d axes, want %d (x and y per chart)", n, 2*len(tc.charts))
			}
			n, names := count(els, "path", "series")
			if n != len(tc.series) || strings.Join(names, ",") != strings.Join(tc.series, ",") {
				t.Errorf("series drawn: %v, want %v", names, tc.series)
			}
			for _, e := range els {
				if e.name == "path" && strings.ContainsAny(e.attrs["d"], "NnIi") { // NaN, Inf
					t.Errorf("path %s has non-numbers: %s", e.attrs["data-name"], e.attrs["d"])
				}
			}
			if os.Getenv("SVG_OUT") != "" { // look at them: SVG_OUT=/tmp go test -run WriteSVG
				_ = os.WriteFile(filepath.Join(os.Getenv("SVG_OUT"), strings.ReplaceAll(tc.name, " ", "_")+".svg"), buf.Bytes(), 0o644)
			}
		})
	}
}

func TestCDF(t *testing.T) {
	s := CDF("x", []float64{3, 1, 2, 4})
	if want := []float64{1, 2, 3, 4}; !equal(s.X, want) {
		t.Errorf("x = %v, want %v", s.X, want)
	}
	if want := []float64{0.25, 0.5, 0.75, 1}; !equal(s.Y, want) {
		t.Errorf("y = %v, want %v", s.Y, want)
	}
	var many []float64
	for i := range 2000 {
		many = append(many, float64(2000-i))
	}
	s = CDF("many", many)
	if len(s.X) != maxSeriesPoints || s.X[len(s.X)-1] != 2000 || s.Y[len(s.Y)-1] != 1 || s.X[0] != 10 {
		t.Errorf("2000 samples: %d points from (%g, %g) to (%g, %g); want %d, the 0.5 %% quantile first, the maximum last",
			len(s.X), s.X[0], s.Y[0], s.X[len(s.X)-1], s.Y[len(s.Y)-1], maxSeriesPoints)
	}
}

func TestAxisTicks(t *testing.T) {
	a := newAxis(130, 4200, 0, 100, true)
	if a.lo != 100 || a.hi != 5000 || strings.Join(a.tickLabels, " ") != "100 200 500 1000 2000 5000" {
		t.Errorf("log axis 130..4200: %g..%g, ticks %v", a.lo, a.hi, a.tickLabels)
	}
	a = newAxis(62, 11000, 0, 100, true)
	if a.lo != 50 || a.hi != 20000 || strings.Join(a.tickLabels, " ") != "50 100 200 500 1000 2000 5000 10000 20000" {
		t.Errorf("log axis 62..11000: %g..%g, ticks %v", a.lo, a.hi, a.tickLabels)
	}
	a = newAxis(3, 90000, 0, 100, true) // more than 3.5 decades: decades only
	if a.lo != 2 || a.hi != 100000 || strings.Join(a.tickLabels, " ") != "10 100 1000 10000 100000" {
		t.Errorf("log axis 3..90000: %g..%g, ticks %v", a.lo, a.hi, a.tickLabels)
	}
	a = newAxis(0, 0.93, 0, 100, false)
	if a.lo != 0 || a.hi != 1 || strings.Join(a.tickLabels, " ") != "0.0 0.2 0.4 0.6 0.8 1.0" {
		t.Errorf("linear axis 0..0.93: %g..%g, ticks %v", a.lo, a.hi, a.tickLabels)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}
