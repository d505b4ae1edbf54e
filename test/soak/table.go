package soak

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// WriteSamples writes the samples as a Markdown table: when, which crimux
// process and how old it was, then one column per metric.
func WriteSamples(w io.Writer, metrics []Metric, samples []Sample) error {
	var b strings.Builder
	b.WriteString("| minute | crimux process | its age | ")
	for _, m := range metrics {
		b.WriteString(m.Title + " | ")
	}
	b.WriteString("\n|---:|---:|---:|" + strings.Repeat("---:|", len(metrics)) + "\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "| %.1f | %d | %s | ", s.At.Minutes(), s.Process, s.Age.Round(time.Second))
		for i, m := range metrics {
			b.WriteString(formatValue(s.Values[i], m.Decimals) + " | ")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, strings.ReplaceAll(b.String(), " | \n", " |\n"))
	return err
}

// WriteGrowth writes the verdicts as a Markdown table.
func WriteGrowth(w io.Writer, growth []Growth, win Windows, limit float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| metric | median, minutes %s | median, minutes %s | growth | allowed | max from minute %s | within %g %% |\n",
		minutes(win.Base[0], win.Base[1]), minutes(win.Final, -1), minutes(win.Base[0], -2), limit*100)
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, g := range growth {
		verdict := "yes"
		if !g.OK {
			verdict = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s (%d) | %s (%d) | %s | %s | %s | %s |\n", g.Title,
			formatValue(g.Base, g.Decimals), g.NBase, formatValue(g.Final, g.Decimals), g.NFinal,
			formatPercent(g.Percent()), "+"+formatValue(g.Allowed, max(g.Decimals, 1)), formatValue(g.Max, g.Decimals), verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Line is the verdict of one metric as the test prints it:
// SOAK <key> base <median> final <median> growth <percent> % allowed <abs> ok|GROWS.
func (g Growth) Line() string {
	verdict := "ok"
	if !g.OK {
		verdict = "GROWS"
	}
	return fmt.Sprintf("SOAK %s base %s final %s growth %s allowed +%s %s", g.Key,
		formatValue(g.Base, g.Decimals), formatValue(g.Final, g.Decimals), formatPercent(g.Percent()),
		formatValue(g.Allowed, max(g.Decimals, 1)), verdict)
}

// minutes prints a window: "10–20"; to -1 is open-ended ("50–end"),
// -2 just its start.
func minutes(from, to time.Duration) string {
	f := minute(from)
	switch to {
	case -1:
		return f + "–end"
	case -2:
		return f
	}
	return f + "–" + minute(to)
}

// minute prints d in minutes, to a tenth.
func minute(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Minutes()*10)/10, 'f', -1, 64)
}

func formatValue(v float64, decimals int) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func formatPercent(p float64) string {
	if math.IsNaN(p) {
		return "—"
	}
	return fmt.Sprintf("%+.1f %%", p)
}
