package cgroup

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// cpusetFiles are the leaf's cpuset files and the Spec fields they hold.
var cpusetFiles = []struct {
	file string
	of   func(Spec) string
}{
	{"cpuset.mems", func(s Spec) string { return s.Mems }},
	{"cpuset.cpus", func(s Spec) string { return s.CPUs }},
}

// cpusetValues pin the leaf to s's cpuset. On v1 a cpuset cannot inherit:
// an unset list is its nearest ancestor's (read now), so an update that
// drops the pinning lifts it. On the unified hierarchy an empty list
// inherits; it is written only where the leaf has the file (the cpuset
// controller enabled for it).
func (s Spec) cpusetValues(l Layout) ([]Value, error) {
	h, ok := l.Controller("cpuset")
	if !ok {
		if s.CPUs != "" || s.Mems != "" {
			return nil, fmt.Errorf("cgroup %s: cpuset %q/%q asked but no hierarchy holds the cpuset controller", s.Name, s.CPUs, s.Mems)
		}
		return nil, nil
	}
	parent, _, err := s.Paths()
	if err != nil {
		return nil, err
	}
	leaf, err := l.leafPath(s)
	if err != nil {
		return nil, err
	}
	var out []Value
	for _, f := range cpusetFiles {
		data := f.of(s)
		switch {
		case !h.Unified && data == "":
			if data, err = inheritedCpuset(h.Mount, parent, f.file); err != nil {
				return nil, err
			}
		case h.Unified && data == "":
			if _, err := os.Stat(filepath.Join(h.Mount, leaf, f.file)); err != nil {
				continue
			}
		}
		out = append(out, Value{Hierarchy: h.Mount, File: f.file, Data: data})
	}
	return out, nil
}

// inheritedCpuset is the list in file of dir or its nearest ancestor that
// has one (under the hierarchy mounted at mount).
func inheritedCpuset(mount, dir, file string) (string, error) {
	for d := dir; ; d = path.Dir(d) {
		b, err := os.ReadFile(filepath.Join(mount, d, file))
		if err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b)), nil
		}
		if d == "/" || d == "." {
			return "", fmt.Errorf("no %s above %s in %s", file, dir, mount)
		}
	}
}

// validCpuset checks a kernel list ("0-3,8"): digits, commas and dashes.
func validCpuset(field, list string) error {
	if strings.Trim(list, "0123456789,-") != "" {
		return fmt.Errorf("%s %q: not a CPU or node list like 0-3,8", field, list)
	}
	return nil
}
