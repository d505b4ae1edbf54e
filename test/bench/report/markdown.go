package report

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crimux/crimux/test/bench/machine"
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

// Counts are the run's counts (the bench's flags), for the report.
type Counts struct {
	RPCCalls, ListPods, ListCalls, LifecycleRounds, VMRounds, VMMiB     int
	SnapshotRounds, Burst, BurstMiB, RecoveryContainers, RecoveryRounds int
	LoadVMs, LoadSessions, LoadClients                                  int
}

// WriteDoc rewrites the bench section of path with this run's table.
func WriteDoc(path string, res *Results, h machine.Facts, c Counts) error {
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
	pictures, err := res.writePictures(filepath.Join(filepath.Dir(path), PicturesDir))
	if err != nil {
		return err
	}
	doc := before + beginMarker + "\n" + section(res, h, c) + picturesSection(pictures) + endMarker + after
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// section is the generated Markdown: machine, versions, counts, table.
func section(res *Results, h machine.Facts, c Counts) string {
	var s strings.Builder
	fmt.Fprintf(&s, "## Latest run: %s\n\n", h.Date)
	fmt.Fprintf(&s, "| | |\n|---|---|\n")
	row := func(k, v string) {
		if v == "" {
			v = "?"
		}
		fmt.Fprintf(&s, "| %s | %s |\n", k, v)
	}
	row("machine", fmt.Sprintf("%s, %d cores, %s RAM", h.CPU, h.Cores, h.Memory))
	row("os", fmt.Sprintf("%s, kernel %s", h.OS, h.Kernel))
	row("crimux", h.Crimux)
	row("containerd", h.Containerd)
	row("libvirt / qemu", h.Libvirt+" / "+h.Qemu+" (TCG)")
	row("go", h.GoVersion)
	row("load average", fmt.Sprintf("%s at start, %s at end (1, 5, 15 min)", h.LoadStart, h.LoadEnd))
	row("counts", counts(c))
	row("run took", h.Took.Round(time.Second).String()+" (set-up and cleanup included)")
	s.WriteString("\n| figure | value | unit | goal | crimux | direct | notes |\n|---|---:|---|---:|---|---|---|\n")
	for _, f := range Catalogue {
		r := res.Get(f.Name)
		goal := "—"
		if f.Goal != 0 {
			goal = "≤ " + FormatValue(f.Goal)
			if !math.IsNaN(r.Value) && r.Value > f.Goal {
				goal += " **over**"
			}
		}
		note := f.What
		if r.Note != "" {
			note += ". " + r.Note
		}
		fmt.Fprintf(&s, "| `%s` | %s | %s | %s | %s | %s | %s |\n", f.Name, FormatValue(r.Value), f.Unit, goal,
			cell(r.Crimux), cell(r.Direct), cell(note))
	}
	if f, score, ok := res.worst(); ok {
		fmt.Fprintf(&s, "\nFurthest from its goal: `%s` = %s %s, %.2f× its goal of %s.\n",
			f.Name, FormatValue(res.Get(f.Name).Value), f.Unit, score, FormatValue(f.Goal))
	}
	s.WriteString("\nEvery sample of the run: `/run/crimux-testbed/bench/samples.txt` (Go benchmark format: `benchstat -col /path samples.txt`).\n")
	return s.String()
}

// picturesSection links the run's pictures (written beside the file).
func picturesSection(names []string) string {
	if len(names) == 0 {
		return ""
	}
	var s strings.Builder
	s.WriteString("\nThe run's distributions, per phase:\n")
	for _, n := range names {
		fmt.Fprintf(&s, "\n![%s](%s/%s.svg)\n", n, PicturesDir, n)
	}
	return s.String()
}

func counts(c Counts) string {
	return fmt.Sprintf("rpc %d calls/path; lists %d pods, %d calls/path; lifecycle %d rounds/path; VM start %d rounds/path (%d MiB); "+
		"snapshots %d rounds/path; burst %d × %d MiB; recovery %d containers + the burst VMs, %d rounds; "+
		"load %d exec sessions into %d VMs, %d polling clients",
		c.RPCCalls, c.ListPods, c.ListCalls, c.LifecycleRounds, c.VMRounds, c.VMMiB,
		c.SnapshotRounds, c.Burst, c.BurstMiB, c.RecoveryContainers, c.RecoveryRounds,
		c.LoadSessions, c.LoadVMs, c.LoadClients)
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
