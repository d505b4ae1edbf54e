package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimitedV1 is where cgroup v1 memory limits start to mean "none" (the
// kernel reports PAGE_COUNTER_MAX pages, rounded: 9223372036854771712).
const unlimitedV1 = 1 << 62

// MemoryLimit reads the memory limit of a pod's cgroup parent (a CRI
// cgroup_parent): the room everything under it shares. limited is false
// when the parent has no limit or does not exist (yet).
func (l Layout) MemoryLimit(parent string) (limit int64, limited bool, err error) {
	dir, err := parentPath(parent)
	if err != nil {
		return 0, false, err
	}
	h, ok := l.Controller("memory")
	if !ok {
		return 0, false, nil
	}
	file := "memory.limit_in_bytes"
	if h.Unified {
		file = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(h.Mount, dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return parseMemoryLimit(strings.TrimSpace(string(b)))
}

// parseMemoryLimit reads memory.limit_in_bytes (v1) or memory.max (v2).
func parseMemoryLimit(s string) (int64, bool, error) {
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("memory limit %q: %w", s, err)
	}
	if n >= unlimitedV1 {
		return 0, false, nil
	}
	return int64(n), true, nil
}
