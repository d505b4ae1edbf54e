package cgroup

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// Value is one write into a leaf: File in the leaf's directory of the
// hierarchy mounted at Hierarchy.
type Value struct {
	Hierarchy string
	File      string
	Data      string
}

// Path is the file the value goes to, for a leaf relative to the roots.
func (v Value) Path(leaf string) string {
	return filepath.Join(v.Hierarchy, leaf, v.File)
}

// LeafDirs returns the leaf's directory in every hierarchy of l.
func (l Layout) LeafDirs(s Spec) ([]string, error) {
	leaf, err := l.leafPath(s)
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(l.Hierarchies))
	for _, h := range l.Hierarchies {
		dirs = append(dirs, filepath.Join(h.Mount, leaf))
	}
	return dirs, nil
}

// Values returns what the limits of s write, in order, for layout l: each
// limit goes to the hierarchy that holds its controller (v1 first, else the
// unified one). Unset limits are written as "no limit", so Update can lift
// them. A limit whose controller is nowhere is an error; an unset one is
// not.
func (s Spec) Values(l Layout) ([]Value, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var out []Value
	if h, ok := l.Controller("cpu"); ok {
		if h.Unified {
			out = append(out, s.cpuValuesV2(h)...)
		} else {
			out = append(out, s.cpuValuesV1(h)...)
		}
	} else if s.CPUQuota > 0 || s.CPUShares > 0 {
		return nil, fmt.Errorf("cgroup %s: cpu limits set but no hierarchy holds the cpu controller", s.Name)
	}
	if h, ok := l.Controller("memory"); ok {
		out = append(out, s.memoryValue(h))
	} else if s.MemoryLimit > 0 {
		return nil, fmt.Errorf("cgroup %s: memory limit set but no hierarchy holds the memory controller", s.Name)
	}
	cpuset, err := s.cpusetValues(l)
	if err != nil {
		return nil, err
	}
	return append(out, cpuset...), nil
}

// cpuValuesV2 are the cpu limits' writes into the unified hierarchy h.
func (s Spec) cpuValuesV2(h Hierarchy) []Value {
	var out []Value
	if s.CPUShares > 0 {
		out = append(out, h.write("cpu.weight", strconv.FormatUint(cgroup2.ConvertCPUSharesToCgroupV2Value(s.CPUShares), 10)))
	}
	var quota *int64
	var period *uint64
	if s.CPUQuota > 0 {
		quota = &s.CPUQuota
	}
	if s.CPUPeriod > 0 {
		p := uint64(s.CPUPeriod)
		period = &p
	}
	return append(out, h.write("cpu.max", string(cgroup2.NewCPUMax(quota, period))))
}

// cpuValuesV1 are the cpu limits' writes into the v1 hierarchy h.
func (s Spec) cpuValuesV1(h Hierarchy) []Value {
	var out []Value
	if s.CPUShares > 0 {
		out = append(out, h.write("cpu.shares", strconv.FormatUint(s.CPUShares, 10)))
	}
	// The period before the quota; apply retries a failed write after the
	// others, which covers the reverse order the kernel sometimes needs
	// (runc does the same dance).
	if s.CPUPeriod > 0 {
		out = append(out, h.write("cpu.cfs_period_us", strconv.FormatInt(s.CPUPeriod, 10)))
	}
	quota := s.CPUQuota
	if quota <= 0 {
		quota = -1
	}
	return append(out, h.write("cpu.cfs_quota_us", strconv.FormatInt(quota, 10)))
}

// memoryValue is the memory limit's write into h ("no limit" if unset).
func (s Spec) memoryValue(h Hierarchy) Value {
	switch {
	case h.Unified && s.MemoryLimit > 0:
		return h.write("memory.max", strconv.FormatInt(s.MemoryLimit, 10))
	case h.Unified:
		return h.write("memory.max", "max")
	case s.MemoryLimit > 0:
		return h.write("memory.limit_in_bytes", strconv.FormatInt(s.MemoryLimit, 10))
	default:
		return h.write("memory.limit_in_bytes", "-1")
	}
}

// write is data written into file of the leaf's directory in h.
func (h Hierarchy) write(file, data string) Value {
	return Value{Hierarchy: h.Mount, File: file, Data: data}
}
