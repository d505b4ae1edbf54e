// Package cgroups owns the cgroups of the bench's VM pods: their root
// (/crimux-bench, the parent of every pod's cgroup parent, named by run),
// the host's hierarchies they live in, and their removal.
package cgroups

import (
	"errors"
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

// WeighRoot gives the bench's root cgroup the CPU weight of as many
// processes (tasks) at the top of the hierarchy. The direct path's qemus run
// there, in libvirtd's cgroup, each weighed as one task against every
// other; crimux's run in their pods' cgroups below Root, which by default
// weighs as one task for all of them: with 50 VMs, crimux's guests got a
// fraction of the CPU the direct path's got. (kubelet weighs its pods'
// root by the node's allocatable CPU instead: a policy, not crimux's
// cost.) cgroup v1's cpu.shares, v2's cpu.weight; hierarchies without a
// CPU controller are left alone.
func WeighRoot(tasks int) error {
	tasks = max(tasks, 1)
	var errs []error
	for _, h := range Hierarchies() {
		file, value := "cpu.shares", min(1024*tasks, 262144)
		if _, err := os.Stat(filepath.Join(h, "cpu.shares")); err != nil {
			if _, err := os.Stat(filepath.Join(h, "cgroup.controllers")); err != nil {
				continue
			}
			file, value = "cpu.weight", min(100*tasks, 10000)
		}
		root := filepath.Join(h, Root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, file)); err != nil {
			continue // v2 without the cpu controller enabled here
		}
		if err := os.WriteFile(filepath.Join(root, file), []byte(fmt.Sprint(value)), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
