// Package cgroups owns the cgroups of the bench's pods: their root
// (/crimux-bench, the parent of every pod's cgroup parent, named by run),
// the host's hierarchies they live in, killing what runs in them, and
// their removal.
package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is the parent of every VM pod's cgroup parent, and of Direct.
const Root = "/crimux-bench"

// ContainerPods is the cgroup parent of the run's container pods (pods
// and their containers, through containerd), beside its VM pods' ones:
// the run's end kills what is left in it (Kill).
func ContainerPods(runID string) string { return Root + "/" + runID + "-pods" }

// Direct is where the direct path's qemus run, each in a cgroup of its
// own as each VM pod has one, beside the VM pods' cgroup parents: both
// paths' guests weigh alike against the host's daemons and each other.
// One for every run: the direct path's emulator names it
// (libvirtdirect.PlacingEmulator).
const Direct = Root + "/direct"

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
		RemoveTree(filepath.Join(h, Direct)) // leaves those of direct VMs still running
		_ = os.Remove(root)                  // fails while another run's cgroups are there
	}
	if len(left) > 0 {
		return fmt.Errorf("%d cgroups not removed, e.g. %s: processes still in them (the next run's sweep retries)", len(left), left[0])
	}
	return nil
}

// cpuHierarchy is a mounted hierarchy with a CPU controller, and its
// weight file: cgroup v1's cpu.shares (1024 a task) or v2's cpu.weight
// (100 a task).
type cpuHierarchy struct {
	dir, weightFile string
	perTask, most   int
}

// cpuHierarchies are the mounted hierarchies with a CPU controller.
func cpuHierarchies() []cpuHierarchy {
	var out []cpuHierarchy
	for _, h := range Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, "cpu.shares")); err == nil {
			out = append(out, cpuHierarchy{h, "cpu.shares", 1024, 262144})
		} else if c, err := os.ReadFile(filepath.Join(h, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(c)), "cpu") {
			out = append(out, cpuHierarchy{h, "cpu.weight", 100, 10000})
		}
	}
	return out
}

// WeighRoot gives the bench's root cgroup the CPU weight of as many
// processes (tasks) at the top of the hierarchy. crimux's VMs run in their
// pods' cgroups below Root, and so do the direct path's (Place): by
// default Root weighs as one task for all of them against every daemon of
// the host. kubelet weighs its pods' root by the node's allocatable CPU,
// which the burst copies (a policy, not crimux's cost). Hierarchies with
// no CPU controller enabled there are left alone.
func WeighRoot(tasks int) error {
	tasks = max(tasks, 1)
	var errs []error
	for _, h := range cpuHierarchies() {
		root := filepath.Join(h.dir, Root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, h.weightFile)); err != nil {
			continue // v2 without the cpu controller enabled here
		}
		value := min(h.perTask*tasks, h.most)
		if err := os.WriteFile(filepath.Join(root, h.weightFile), []byte(fmt.Sprint(value)), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Delegate makes the cgroup parent (relative to each hierarchy's root) in
// every hierarchy with a CPU controller, owned by uid:gid so that its
// processes can make cgroups of their own below it and move themselves
// there (cgroup v1: write access to the new cgroup's cgroup.procs is
// enough for a process moving itself), and returns those directories. v2
// would also need the common ancestor's cgroup.procs: there, placement by
// uid fails loudly instead.
func Delegate(parent string, uid, gid int) ([]string, error) {
	var dirs []string
	var errs []error
	for _, h := range cpuHierarchies() {
		dir := filepath.Join(h.dir, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			errs = append(errs, err)
			continue
		}
		dirs = append(dirs, dir)
	}
	return dirs, errors.Join(errs...)
}

// Kill SIGKILLs every process in the cgroup parent and below it, in every
// hierarchy, until none is left or timeout passes (a process may be
// forking meanwhile).
func Kill(parent string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := 0
		for _, h := range Hierarchies() {
			n += killTree(filepath.Join(h, parent))
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still in %s after %s", parent, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killTree SIGKILLs the processes in dir and the cgroups below it, and
// returns how many it found.
func killTree(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
		return nil
	})
	return n
}
