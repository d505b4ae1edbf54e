package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/crimux/crimux/internal/mountinfo"
)

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	// Mount is where it is mounted, e.g. /sys/fs/cgroup/cpu.
	Mount string
	// Unified marks the cgroup2 hierarchy.
	Unified bool
	// Controllers are, for v1, the controllers bound to it ("cpu",
	// "cpuacct", "name=systemd"); for the unified hierarchy, those its root
	// offers (cgroup.controllers) — none of those bound to v1, so on a
	// hybrid host usually none of cpu and memory.
	Controllers []string
}

// Has tells whether the hierarchy holds a controller.
func (h Hierarchy) Has(controller string) bool {
	return slices.Contains(h.Controllers, controller)
}

// Layout is every cgroup hierarchy of the host, as crimux sees it: qemu is
// placed in all of them.
type Layout struct {
	Hierarchies []Hierarchy
	// Systemd is set where systemd runs as init on the unified hierarchy
	// alone: a VM under a slice parent then gets a scope (scope.go).
	Systemd bool
}

// Mode names the host's cgroup mode: "v1" (legacy), "hybrid" or "v2".
func (l Layout) Mode() string {
	var v1, v2 bool
	for _, h := range l.Hierarchies {
		if h.Unified {
			v2 = true
		} else {
			v1 = true
		}
	}
	switch {
	case v1 && v2:
		return "hybrid"
	case v2:
		return "v2"
	case v1:
		return "v1"
	}
	return "none"
}

// Controller returns the hierarchy where a controller's files live: its v1
// mount, or the unified hierarchy where that offers it.
func (l Layout) Controller(name string) (Hierarchy, bool) {
	for _, h := range l.Hierarchies {
		if !h.Unified && h.Has(name) {
			return h, true
		}
	}
	for _, h := range l.Hierarchies {
		if h.Unified && h.Has(name) {
			return h, true
		}
	}
	return Hierarchy{}, false
}

func (l Layout) unified() (Hierarchy, bool) {
	for _, h := range l.Hierarchies {
		if h.Unified {
			return h, true
		}
	}
	return Hierarchy{}, false
}

// Discover reads the hierarchies from /proc/self/mountinfo and, for the
// unified one, the controllers its root offers.
func Discover() (Layout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Layout{}, err
	}
	defer f.Close()
	hs, err := parseMountinfo(f)
	if err != nil {
		return Layout{}, err
	}
	for i, h := range hs {
		if !h.Unified {
			continue
		}
		b, err := os.ReadFile(filepath.Join(h.Mount, "cgroup.controllers"))
		if err != nil {
			return Layout{}, fmt.Errorf("controllers of the unified hierarchy: %w", err)
		}
		hs[i].Controllers = strings.Fields(string(b))
	}
	if len(hs) == 0 {
		return Layout{}, fmt.Errorf("no cgroup hierarchy is mounted")
	}
	l := Layout{Hierarchies: hs}
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() && l.Mode() == "v2" {
		l.Systemd = true
	}
	return l, nil
}

// notControllers are the v1 super options that name no controller.
var notControllers = []string{"rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods"}

// parseMountinfo finds the cgroup mounts in a mountinfo file. A hierarchy
// mounted more than once (a bind mount) counts once, at its first mount of
// the hierarchy's root; mounts of a sub-directory (a container's view) are
// not a root crimux could place under, and are skipped.
func parseMountinfo(r io.Reader) ([]Hierarchy, error) {
	var out []Hierarchy
	seen := map[string]bool{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("mountinfo: no separator in %q", line)
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			return nil, fmt.Errorf("mountinfo: short line %q", line)
		}
		devID, root, mount, fstype := fields[2], fields[3], mountinfo.Unescape(fields[4]), tail[0]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		if root != "/" || seen[devID] {
			continue
		}
		seen[devID] = true
		h := Hierarchy{Mount: mount, Unified: fstype == "cgroup2"}
		if !h.Unified {
			for _, opt := range strings.Split(tail[2], ",") {
				if slices.Contains(notControllers, opt) || strings.HasPrefix(opt, "release_agent=") {
					continue
				}
				h.Controllers = append(h.Controllers, opt)
			}
		}
		out = append(out, h)
	}
	return out, s.Err()
}
