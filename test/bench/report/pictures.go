package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// picture is one SVG beside the table: a phase's charts.
type picture struct {
	name   string
	charts []Chart
}

// PicturesDir is where the pictures go, relative to the Markdown file.
const PicturesDir = "bench"

// AddChart adds c to the picture name (a phase: "rpc", "lists", "burst"),
// written as <PicturesDir>/<name>.svg beside the Markdown file. A chart of
// the same title replaces the earlier one (a phase run again).
func (r *Results) AddChart(name string, c Chart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.pictures, func(p picture) bool { return p.name == name })
	if i < 0 {
		r.pictures = append(r.pictures, picture{name: name})
		i = len(r.pictures) - 1
	}
	p := &r.pictures[i]
	if j := slices.IndexFunc(p.charts, func(old Chart) bool { return old.Title == c.Title }); j >= 0 {
		p.charts[j] = c
		return
	}
	p.charts = append(p.charts, c)
}

// writePictures writes every picture into dir (made if missing) and
// returns their names, in the order they were first added.
func (r *Results) writePictures(dir string) ([]string, error) {
	r.mu.Lock()
	pictures := slices.Clone(r.pictures)
	r.mu.Unlock()
	if len(pictures) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pictures {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, p.charts); err != nil {
			return names, err
		}
		path := filepath.Join(dir, p.name+".svg")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return names, fmt.Errorf("picture %s: %w", p.name, err)
		}
		names = append(names, p.name)
	}
	return names, nil
}
