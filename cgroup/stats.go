package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what a leaf cgroup has used.
type Usage struct {
	// CPUNanos is its CPU time.
	CPUNanos uint64
	// MemoryBytes is the memory charged to it; WorkingSetBytes that less
	// its inactive file pages (never below zero), as cadvisor and kubelet
	// count a container's working set.
	MemoryBytes, WorkingSetBytes uint64
}

// Stats returns the leaf's usage. CPU comes from v1 cpuacct.usage, else
// from the unified cpu.stat (present in every v2 cgroup, controller or
// not); memory from v1 memory.usage_in_bytes and total_inactive_file,
// else from v2 memory.current and inactive_file.
func (l Layout) Stats(s Spec) (Usage, error) {
	leaf, err := l.leafPath(s)
	if err != nil {
		return Usage{}, err
	}
	if l.scoped(s) {
		if ok, err := l.Exists(s); err == nil && !ok {
			return Usage{}, nil // no qemu runs: systemd removed its scope
		}
	}
	var u Usage
	u.CPUNanos, err = l.cpuUsage(leaf)
	if err != nil {
		return Usage{}, fmt.Errorf("cpu usage of %s: %w", leaf, err)
	}
	u.MemoryBytes, u.WorkingSetBytes, err = l.memoryUsage(leaf)
	if err != nil {
		return Usage{}, fmt.Errorf("memory usage of %s: %w", leaf, err)
	}
	return u, nil
}

func (l Layout) cpuUsage(leaf string) (uint64, error) {
	if h, ok := l.Controller("cpuacct"); ok && !h.Unified {
		return readUint(filepath.Join(h.Mount, leaf, "cpuacct.usage"))
	}
	if h, ok := l.unified(); ok {
		usec, err := readKey(filepath.Join(h.Mount, leaf, "cpu.stat"), "usage_usec")
		return usec * 1000, err
	}
	return 0, fmt.Errorf("no hierarchy accounts cpu time")
}

func (l Layout) memoryUsage(leaf string) (usage, workingSet uint64, err error) {
	h, ok := l.Controller("memory")
	if !ok {
		return 0, 0, fmt.Errorf("no hierarchy holds the memory controller")
	}
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if h.Unified {
		usageFile, inactiveKey = "memory.current", "inactive_file"
	}
	dir := filepath.Join(h.Mount, leaf)
	usage, err = readUint(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, 0, err
	}
	inactive, err := readKey(filepath.Join(dir, "memory.stat"), inactiveKey)
	if err != nil {
		return 0, 0, err
	}
	if inactive > usage {
		return usage, 0, nil
	}
	return usage, usage - inactive, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// readKey reads one "key value" line of a flat keyed file (cpu.stat,
// memory.stat).
func readKey(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}
