package cgroup

import (
	"fmt"
	"path"
	"strings"
)

// NamePrefix starts the name of every leaf crimux makes: the name is the
// only stamp a cgroup can carry (cgroupfs holds no files of our own), so
// it is how a later garbage collector tells crimux's cgroups from others.
const NamePrefix = "crimux-"

// maxNameLen keeps a leaf name well below NAME_MAX.
const maxNameLen = 200

// Spec is the cgroup of one VM: a leaf under the pod's cgroup parent, with
// the VM's limits.
type Spec struct {
	// Parent is the CRI cgroup_parent of the pod, in either driver's form:
	// cgroupfs "/kubepods/burstable/pod<uid>" or systemd
	// "kubepods-burstable-pod<uid>.slice". It is never created with limits
	// nor removed here.
	Parent string
	// Name is the leaf, e.g. "crimux-vm-<id>"; it must start with
	// NamePrefix.
	Name string
	// CPUQuota and CPUPeriod are CFS bandwidth in microseconds; a quota of
	// 0 or less means no limit, a period of 0 the kernel's (100000).
	CPUQuota, CPUPeriod int64
	// CPUShares is the v1 weight (2…262144); 0 leaves the default.
	CPUShares uint64
	// MemoryLimit in bytes, qemu's own overhead included; 0 or less means
	// no limit.
	MemoryLimit int64
	// CPUs and Mems are the cpuset (kernel list format, "1,3-4") every
	// thread in the leaf may run on and allocate from; "" is the parent's.
	CPUs, Mems string
}

// Validate checks the names; limits are checked by the kernel.
func (s Spec) Validate() error {
	if !strings.HasPrefix(s.Name, NamePrefix) || len(s.Name) == len(NamePrefix) {
		return fmt.Errorf("cgroup name %q: must start with %q", s.Name, NamePrefix)
	}
	if len(s.Name) > maxNameLen || strings.ContainsAny(s.Name, "/\x00\n") || s.Name == "." || s.Name == ".." {
		return fmt.Errorf("cgroup name %q: not a single path element", s.Name)
	}
	if s.CPUPeriod < 0 {
		return fmt.Errorf("cgroup %s: negative cpu period %d", s.Name, s.CPUPeriod)
	}
	if err := validCpuset("cpuset cpus", s.CPUs); err != nil {
		return fmt.Errorf("cgroup %s: %w", s.Name, err)
	}
	if err := validCpuset("cpuset mems", s.Mems); err != nil {
		return fmt.Errorf("cgroup %s: %w", s.Name, err)
	}
	_, err := parentPath(s.Parent)
	return err
}

// Paths returns the pod's parent and the VM's leaf as paths relative to
// the root of every hierarchy (the same in each), e.g.
// "/kubepods/burstable/pod1" and "/kubepods/burstable/pod1/crimux-vm-1".
func (s Spec) Paths() (parent, leaf string, err error) {
	if err := s.Validate(); err != nil {
		return "", "", err
	}
	parent, err = parentPath(s.Parent)
	if err != nil {
		return "", "", err
	}
	return parent, path.Join(parent, s.Name), nil
}

// parentPath turns a CRI cgroup_parent into a path under the hierarchies'
// roots. A systemd slice name is expanded the way systemd (and runc's
// ExpandSlice) lays it out: "a-b-c.slice" is /a.slice/a-b.slice/a-b-c.slice.
// crimux writes cgroupfs directly under a systemd slice too: it runs no
// systemd units of its own.
func parentPath(parent string) (string, error) {
	switch {
	case parent == "":
		return "", fmt.Errorf("cgroup parent is empty: crimux only places VMs under a pod's cgroup")
	case strings.HasSuffix(parent, ".slice") && !strings.Contains(parent, "/"):
		return expandSlice(parent)
	case !strings.HasPrefix(parent, "/"):
		return "", fmt.Errorf("cgroup parent %q: neither an absolute cgroupfs path nor a systemd slice", parent)
	}
	for _, elem := range strings.Split(parent[1:], "/") {
		if elem == ".." {
			return "", fmt.Errorf("cgroup parent %q: holds '..'", parent)
		}
	}
	clean := path.Clean(parent)
	if clean == "/" {
		return "", fmt.Errorf("cgroup parent %q: the root is no pod's cgroup", parent)
	}
	return clean, nil
}

func expandSlice(slice string) (string, error) {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "-" {
		return "", fmt.Errorf("cgroup parent %q: the root slice is no pod's cgroup", slice)
	}
	if name == "" || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("cgroup parent %q: not a valid systemd slice name", slice)
	}
	var b strings.Builder
	prefix := ""
	for _, part := range strings.Split(name, "-") {
		prefix += part
		b.WriteString("/" + prefix + ".slice")
		prefix += "-"
	}
	return b.String(), nil
}

// ParentPath is the path under every hierarchy's root of a CRI
// cgroup_parent (a cgroupfs path, or a systemd slice expanded as systemd
// lays it out).
func ParentPath(parent string) (string, error) { return parentPath(parent) }
