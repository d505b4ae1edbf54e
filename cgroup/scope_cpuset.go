package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// scopeCpusetProperties are AllowedCPUs and AllowedMemoryNodes for s's
// cpuset: set when s pins, and empty (no restriction) when lift is true,
// an update of a scope that was pinned.
func scopeCpusetProperties(s Spec, lift bool) ([]sddbus.Property, error) {
	var props []sddbus.Property
	for _, p := range []struct{ name, list string }{{"AllowedCPUs", s.CPUs}, {"AllowedMemoryNodes", s.Mems}} {
		if p.list == "" && !lift {
			continue
		}
		bits, err := listToBits(p.list)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %s: %w", s.Name, p.name, err)
		}
		props = append(props, sddbus.Property{Name: p.name, Value: godbus.MakeVariant(bits)})
	}
	return props, nil
}

// scopePinned tells whether s's scope has a cpuset of its own now.
func (l Layout) scopePinned(s Spec) bool {
	h, ok := l.unified()
	if !ok {
		return false
	}
	leaf, err := l.leafPath(s)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(h.Mount, leaf, "cpuset.cpus"))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// listToBits turns a kernel list ("0-2,8") into the byte mask systemd
// takes: bit i%8 of byte i/8 is CPU (or node) i.
func listToBits(list string) ([]byte, error) {
	var bits []byte
	if list == "" {
		return bits, nil
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("list %q: %q is no number", list, lo)
		}
		last := first
		if isRange {
			if last, err = strconv.ParseUint(hi, 10, 16); err != nil || last < first {
				return nil, fmt.Errorf("list %q: %q is no range", list, part)
			}
		}
		for i := first; i <= last; i++ {
			for int(i/8) >= len(bits) {
				bits = append(bits, 0)
			}
			bits[i/8] |= 1 << (i % 8)
		}
	}
	return bits, nil
}
