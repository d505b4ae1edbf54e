package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// How long Remove waits for the tasks of a leaf to drain (qemu exiting
// after a destroy).
const (
	removeWait = 5 * time.Second
	removePoll = 50 * time.Millisecond
)

// Create makes the VM's leaf (and any missing parent) in every hierarchy
// and applies its limits. It is idempotent. On failure it removes the leaf
// again (never the parents).
func (l Layout) Create(s Spec) error {
	leaf, err := l.leafPath(s)
	if err != nil {
		return err
	}
	if l.scoped(s) {
		return nil // the scope is made with its first process (Place)
	}
	values, err := s.Values(l)
	if err != nil {
		return err
	}
	if err := l.makeDirs(leaf, values); err != nil {
		_ = l.Remove(s)
		return fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	if err := apply(leaf, values); err != nil {
		_ = l.Remove(s)
		return fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	return nil
}

// Update applies changed limits (UpdateContainerResources). The leaf must
// exist: an error wrapping fs.ErrNotExist says it does not.
func (l Layout) Update(s Spec) error {
	leaf, err := l.leafPath(s)
	if err != nil {
		return err
	}
	if l.scoped(s) {
		return l.updateScope(s)
	}
	ok, err := l.Exists(s)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("update cgroup %s: %w", leaf, fs.ErrNotExist)
	}
	values, err := s.Values(l)
	if err != nil {
		return err
	}
	if err := apply(leaf, values); err != nil {
		return fmt.Errorf("update cgroup %s: %w", leaf, err)
	}
	return nil
}

// Exists tells whether the leaf exists in every hierarchy. A leaf missing
// in some (a crash half-way through Create) counts as missing, so Create
// repairs it.
func (l Layout) Exists(s Spec) (bool, error) {
	dirs, err := l.LeafDirs(s)
	if err != nil {
		return false, err
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, err
		}
	}
	return true, nil
}

// Remove deletes the leaf in every hierarchy, waiting briefly for exiting
// tasks to leave it. A missing leaf is no error; the parent stays.
func (l Layout) Remove(s Spec) error {
	dirs, err := l.LeafDirs(s)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if l.scoped(s) {
			l.stopEmptyScope(s, d)
		}
		if err := rmdirWait(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rmdirWait(dir string) error {
	deadline := time.Now().Add(removeWait)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if p := strings.Fields(string(procs)); len(p) > 0 {
				return fmt.Errorf("remove cgroup %s: %w (still holds pids %s)", dir, err, strings.Join(p, " "))
			}
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(removePoll)
	}
}

// Place moves process pid (all its threads) into the leaf in every
// hierarchy, creating missing directories without touching limits, and
// then checks /proc/<pid>/cgroup: every line must name the leaf.
func (l Layout) Place(s Spec, pid int) error {
	leaf, err := l.leafPath(s)
	if err != nil {
		return err
	}
	if pid <= 0 {
		return fmt.Errorf("place into %s: invalid pid %d", leaf, pid)
	}
	if l.scoped(s) {
		if err := l.placeInScope(s, pid); err != nil {
			return fmt.Errorf("place pid %d into %s: %w", pid, leaf, err)
		}
		return l.checkPlaced(pid, leaf)
	}
	if err := l.makeDirs(leaf, nil); err != nil {
		return fmt.Errorf("place pid %d into %s: %w", pid, leaf, err)
	}
	if v1 := l.v1Hierarchy(); v1 != nil {
		cg, err := cgroup1.Load(cgroup1.StaticPath(leaf), cgroup1.WithHierarchy(v1))
		if err != nil {
			return fmt.Errorf("place pid %d into %s (v1): %w", pid, leaf, err)
		}
		if err := cg.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("place pid %d into %s (v1): %w", pid, leaf, err)
		}
	}
	if h, ok := l.unified(); ok {
		m, err := cgroup2.Load(leaf, cgroup2.WithMountpoint(h.Mount))
		if err == nil {
			err = m.AddProc(uint64(pid))
		}
		if err != nil {
			return fmt.Errorf("place pid %d into %s (unified): %w", pid, leaf, err)
		}
	}
	return l.checkPlaced(pid, leaf)
}

// checkPlaced checks that every cgroup of pid is leaf.
func (l Layout) checkPlaced(pid int, leaf string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return fmt.Errorf("check placement of pid %d: %w", pid, err)
	}
	if err := CheckProcCgroup(string(b), leaf); err != nil {
		return fmt.Errorf("check placement of pid %d: %w", pid, err)
	}
	return nil
}

// CheckProcCgroup checks that every line of a /proc/<pid>/cgroup file
// names leaf.
func CheckProcCgroup(content, leaf string) error {
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return fmt.Errorf("unexpected line %q in /proc/<pid>/cgroup", line)
		}
		if parts[2] != leaf {
			return fmt.Errorf("hierarchy %s:%s is at %s, not %s", parts[0], parts[1], parts[2], leaf)
		}
		n++
	}
	if n == 0 {
		return errors.New("no hierarchies in /proc/<pid>/cgroup")
	}
	return nil
}

// makeDirs creates the leaf in every hierarchy: v1 through containerd's
// cgroup1 (a custom hierarchy of one subsystem per mount; cpuset's copies
// cpus and mems down from the parent, without which no task could join),
// the unified one through cgroup2.NewManager, which on a pure v2 host
// first enables in every ancestor's subtree_control the controllers the
// values need.
func (l Layout) makeDirs(leaf string, values []Value) error {
	if v1 := l.v1Hierarchy(); v1 != nil {
		if _, err := cgroup1.New(cgroup1.StaticPath(leaf), &specs.LinuxResources{}, cgroup1.WithHierarchy(v1)); err != nil {
			return fmt.Errorf("v1: %w", err)
		}
	}
	if h, ok := l.unified(); ok {
		var res cgroup2.Resources
		for _, v := range values {
			if v.Hierarchy != h.Mount {
				continue
			}
			switch {
			case v.File == "cpuset.cpus" || v.File == "cpuset.mems":
				if res.CPU == nil {
					res.CPU = &cgroup2.CPU{}
				}
				if v.File == "cpuset.cpus" {
					res.CPU.Cpus = v.Data
				} else {
					res.CPU.Mems = v.Data
				}
			case strings.HasPrefix(v.File, "cpu."):
				if res.CPU == nil {
					res.CPU = &cgroup2.CPU{}
				}
			case strings.HasPrefix(v.File, "memory."):
				res.Memory = &cgroup2.Memory{}
			}
		}
		if _, err := cgroup2.NewManager(h.Mount, leaf, &res); err != nil {
			return fmt.Errorf("unified: %w", err)
		}
	}
	return nil
}

// v1Hierarchy is the cgroup1 hierarchy of l's v1 mounts, nil if none. The
// subsystem of a mount is named after its directory, so its path is
// exactly mount/leaf whatever controllers share the mount.
func (l Layout) v1Hierarchy() cgroup1.Hierarchy {
	var subsystems []cgroup1.Subsystem
	for _, h := range l.Hierarchies {
		if h.Unified {
			continue
		}
		root, base := filepath.Dir(h.Mount), filepath.Base(h.Mount)
		if h.Has("cpuset") {
			// Found as root/cpuset: the mount itself or, where cpuset
			// shares a mount, the usual symlink to it.
			subsystems = append(subsystems, cgroup1.NewCpuset(root))
			continue
		}
		subsystems = append(subsystems, cgroup1.NewNamed(root, cgroup1.Name(base)))
	}
	if len(subsystems) == 0 {
		return nil
	}
	return func() ([]cgroup1.Subsystem, error) { return subsystems, nil }
}

// apply writes values into the leaf in order. Writes that fail are tried
// once more after all the others: the kernel checks some pairs against
// each other (cfs period and quota against the parent's bandwidth), and the
// second pass gives them the other order.
func apply(leaf string, values []Value) error {
	var failed []Value
	for _, v := range values {
		if err := os.WriteFile(v.Path(leaf), []byte(v.Data), 0); err != nil {
			failed = append(failed, v)
		}
	}
	var errs []error
	for _, v := range failed {
		if err := os.WriteFile(v.Path(leaf), []byte(v.Data), 0); err != nil {
			errs = append(errs, fmt.Errorf("write %q to %s: %w", v.Data, v.Path(leaf), err))
		}
	}
	return errors.Join(errs...)
}
