package vm

import (
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
)

// HugePages is the huge page backing a pod asked for its VM's RAM.
type HugePages struct {
	// PageKiB is the page size (2048 for hugepages-2Mi); 0: none asked.
	PageKiB uint64
	// Bytes is the pod's limit of pages of that size: the guest's RAM.
	Bytes uint64
}

// Pages is how many pages the guest's RAM takes.
func (h HugePages) Pages() uint64 { return h.Bytes / (h.PageKiB << 10) }

// hugePageField names the field in errors.
const hugePageField = "linux.resources.hugepage_limits"

// HugePagesFrom reads the container's huge page limits. kubelet sends one
// per page size of the node, 0 unless the pod asks for some ("2MB",
// "1GB"). A VM's RAM comes from one size: a limit on two is refused, as
// is a limit that is no whole number of pages.
func HugePagesFrom(r *runtimeapi.LinuxContainerResources) (HugePages, error) {
	var out HugePages
	for _, l := range r.GetHugepageLimits() {
		if l.GetLimit() == 0 {
			continue
		}
		kib, err := pageSizeKiB(l.GetPageSize())
		if err != nil {
			return out, err
		}
		if out.PageKiB != 0 {
			return out, errdefs.Invalid(hugePageField, "limits pages of %d KiB and of %d KiB: a VM's RAM comes from one huge page size", out.PageKiB, kib)
		}
		if l.GetLimit()%(kib<<10) != 0 {
			return out, errdefs.Invalid(hugePageField, "%d bytes of %s pages is not a whole number of pages", l.GetLimit(), l.GetPageSize())
		}
		if l.GetLimit() < MinMemoryBytes {
			return out, errdefs.Invalid(hugePageField, "%d bytes of %s pages is less than the %d MiB a VM needs", l.GetLimit(), l.GetPageSize(), MinMemoryBytes>>20)
		}
		out = HugePages{PageKiB: kib, Bytes: l.GetLimit()}
	}
	return out, nil
}

// pageSizeKiB parses kubelet's page size ("2MB", "1GB": binary units, as
// the kernel's hugepages-2048kB).
func pageSizeKiB(size string) (uint64, error) {
	units := map[string]uint64{"KB": 1, "MB": 1 << 10, "GB": 1 << 20}
	for suffix, mult := range units {
		if n, ok := strings.CutSuffix(size, suffix); ok {
			v, err := strconv.ParseUint(n, 10, 32)
			if err == nil && v > 0 {
				return v * mult, nil
			}
		}
	}
	return 0, errdefs.Invalid(hugePageField, "page size %q is not like 2MB or 1GB", size)
}

// configureHugePages backs the guest's RAM with huge pages of s's size,
// allocated when qemu starts (libvirt preallocates huge page memory).
func configureHugePages(s Spec, d *libvirtxml.Domain) error {
	if s.HugePageKiB == 0 {
		return nil
	}
	if s.MaxMemoryMiB > s.MemoryMiB {
		return fmt.Errorf("huge page RAM cannot be resized: max memory %d MiB over %d MiB", s.MaxMemoryMiB, s.MemoryMiB)
	}
	if d.MemoryBacking == nil {
		d.MemoryBacking = &libvirtxml.DomainMemoryBacking{}
	}
	d.MemoryBacking.MemoryHugePages = &libvirtxml.DomainMemoryHugepages{
		Hugepages: []libvirtxml.DomainMemoryHugepage{{Size: uint(s.HugePageKiB), Unit: "KiB"}},
	}
	return nil
}
