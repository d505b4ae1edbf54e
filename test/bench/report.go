package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// The bench owns the part of docs/benchmarks.md between these markers;
// the rest of the file (the analysis) is written by people.
const (
	beginMarker = "<!-- bench:begin: written by `make bench` (test/bench); edit outside the markers -->"
	endMarker   = "<!-- bench:end -->"
)

// docSkeleton is the file's first version, when there is none.
const docSkeleton = `# Benchmarks

What crimux costs over the direct path, measured by ` + "`make bench`" + ` (test/bench).

` + beginMarker + "\n" + endMarker + `

## Analysis
`

// writeDoc rewrites the bench section of path with this run's table.
func writeDoc(path string, res *results, h hostFacts, o options) error {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		old, err = []byte(docSkeleton), nil
	}
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(old), beginMarker)
	_, after, ok2 := strings.Cut(rest, endMarker)
	if !ok1 || !ok2 {
		return fmt.Errorf("no bench markers in %s (%q … %q)", path, beginMarker, endMarker)
	}
	doc := before + beginMarker + "\n" + section(res, h, o) + endMarker + after
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// section is the generated Markdown: machine, versions, counts, table.
func section(res *results, h hostFacts, o options) string {
	var s strings.Builder
	fmt.Fprintf(&s, "## Latest run: %s\n\n", h.date)
	fmt.Fprintf(&s, "| | |\n|---|---|\n")
	row := func(k, v string) {
		if v == "" {
			v = "?"
		}
		fmt.Fprintf(&s, "| %s | %s |\n", k, v)
	}
	row("machine", fmt.Sprintf("%s, %d cores, %s RAM", h.cpu, h.cores, h.memory))
	row("os", fmt.Sprintf("%s, kernel %s", h.os, h.kernel))
	row("crimux", h.crimux)
	row("containerd", h.containerd)
	row("libvirt / qemu", h.libvirt+" / "+h.qemu+" (TCG)")
	row("go", h.goVersion)
	row("load average", fmt.Sprintf("%s at start, %s at end (1, 5, 15 min)", h.loadStart, h.loadEnd))
	row("counts", counts(o))
	row("run took", h.took.Round(time.Second).String()+" (set-up and cleanup included)")
	s.WriteString("\n| figure | value | unit | goal | crimux | direct | notes |\n|---|---:|---|---:|---|---|---|\n")
	for _, f := range catalogue {
		r := res.get(f.name)
		goal := "—"
		if f.goal != 0 {
			goal = "≤ " + formatValue(f.goal)
			if !math.IsNaN(r.value) && r.value > f.goal {
				goal += " **over**"
			}
		}
		note := f.what
		if r.note != "" {
			note += ". " + r.note
		}
		fmt.Fprintf(&s, "| `%s` | %s | %s | %s | %s | %s | %s |\n", f.name, formatValue(r.value), f.unit, goal,
			cell(r.crimux), cell(r.direct), cell(note))
	}
	if f, score, ok := res.worst(); ok {
		fmt.Fprintf(&s, "\nFurthest from its goal: `%s` = %s %s, %.2f× its goal of %s.\n",
			f.name, formatValue(res.get(f.name).value), f.unit, score, formatValue(f.goal))
	}
	s.WriteString("\nEvery sample of the run: `/run/crimux-testbed/bench/samples.txt` (Go benchmark format: `benchstat -col /path samples.txt`).\n")
	return s.String()
}

func counts(o options) string {
	return fmt.Sprintf("rpc %d calls/path; lists %d pods, %d calls/path; lifecycle %d rounds/path; VM start %d rounds/path (%d MiB); "+
		"snapshots %d rounds/path; burst %d × %d MiB; recovery %d containers + the burst VMs, %d rounds",
		o.rpcCalls, o.listPods, o.listCalls, o.lifecycleRounds, o.vmRounds, o.vmMiB,
		o.snapshotRounds, o.burst, o.burstMiB, o.recoveryContainers, o.recoveryRounds)
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
