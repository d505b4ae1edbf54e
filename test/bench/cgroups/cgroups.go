// Package cgroups owns the cgroups of the bench's VM pods: their root
// (/crimux-bench, the parent of every pod's cgroup parent, named by run),
// the host's hierarchies they live in, and their removal.
package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Root is the parent of every VM pod's cgroup parent.
const Root = "/crimux-bench"

// Hierarchies are the mounted cgroup hierarchies (v1 ones and the
// unified one, wherever it is).
func Hierarchies() []string {
	var out []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		out = append(out, "/sys/fs/cgroup")
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		dir := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); e.IsDir() && err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// Remove removes a pod's cgroup parent, children first, in every
// hierarchy (crimux removes the VM's own cgroup; the parent is kubelet's
// to remove, here the bench's).
func Remove(parent string) {
	for _, h := range Hierarchies() {
		RemoveTree(filepath.Join(h, parent))
	}
}

// RemoveTree removes the cgroup dir and the cgroups below it, deepest
// first; it leaves those that still hold processes.
func RemoveTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			RemoveTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// RemoveRun removes the run's pod cgroups, and the bench's root
// cgroup when nothing else is left in it.
func RemoveRun(runID string) error {
	var left []string
	for _, h := range Hierarchies() {
		root := filepath.Join(h, Root)
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), runID+"-") {
				RemoveTree(filepath.Join(root, e.Name()))
				if _, err := os.Stat(filepath.Join(root, e.Name())); err == nil {
					left = append(left, filepath.Join(root, e.Name()))
				}
			}
		}
		_ = os.Remove(root) // fails while another run's cgroups are there
	}
	if len(left) > 0 {
		return fmt.Errorf("%d cgroups not removed, e.g. %s: processes still in them (the next run's sweep retries)", len(left), left[0])
	}
	return nil
}
