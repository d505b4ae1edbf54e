package hostcaps

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
)

// HugePageHost is where the node's huge pages are read: sysfs's pools and
// the mount table (a variable for tests).
var HugePageHost = struct{ Pools, Mounts string }{"/sys/kernel/mm/hugepages", "/proc/self/mounts"}

// CheckHugePages refuses a VM whose RAM is to be huge pages the node
// cannot give now, before anything is made: without a hugetlbfs of that
// page size libvirt cannot back the RAM (FailedPrecondition); with fewer
// free pages than the RAM takes qemu would fail to preallocate it
// (ResourceExhausted). Both name the field and the numbers.
func CheckHugePages(hp vm.HugePages) error {
	if hp.PageKiB == 0 {
		return nil
	}
	const field = "linux.resources.hugepage_limits"
	if !hugetlbfsMounted(hp.PageKiB) {
		return fmt.Errorf("%s: no hugetlbfs of %d KiB pages is mounted on the node, and libvirt backs the guest's RAM from one: "+
			"mount one (mount -t hugetlbfs -o pagesize=%dK hugetlbfs /dev/hugepages) and restart libvirtd: %w",
			field, hp.PageKiB, hp.PageKiB, errdefs.ErrFailedPrecondition)
	}
	pool := filepath.Join(HugePageHost.Pools, fmt.Sprintf("hugepages-%dkB", hp.PageKiB))
	free, errF := readCount(filepath.Join(pool, "free_hugepages"))
	resv, errR := readCount(filepath.Join(pool, "resv_hugepages"))
	if errF != nil || errR != nil {
		return fmt.Errorf("%s: the node has no pool of %d KiB pages (%s): %w", field, hp.PageKiB, pool, errdefs.ErrFailedPrecondition)
	}
	if avail := free - min(resv, free); avail < hp.Pages() {
		return fmt.Errorf("%s: the guest's RAM takes %d pages of %d KiB and the node has %d free (%s): %w",
			field, hp.Pages(), hp.PageKiB, avail, pool, errdefs.ErrResourceExhausted)
	}
	return nil
}

func readCount(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// hugetlbfsMounted tells whether a hugetlbfs of pages of pageKiB is
// mounted (one without a pagesize option has the default size, 2 MiB on
// x86).
func hugetlbfsMounted(pageKiB uint64) bool {
	f, err := os.Open(HugePageHost.Mounts)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[2] != "hugetlbfs" {
			continue
		}
		size := uint64(2048)
		for _, opt := range strings.Split(fields[3], ",") {
			if v, ok := strings.CutPrefix(opt, "pagesize="); ok {
				size = parseKiB(v)
			}
		}
		if size == pageKiB {
			return true
		}
	}
	return false
}

// parseKiB reads a mount option's size ("2M", "1024M", "1G").
func parseKiB(v string) uint64 {
	mult := map[byte]uint64{'K': 1, 'M': 1 << 10, 'G': 1 << 20}[v[len(v)-1]]
	n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
	if mult == 0 || err != nil {
		return 0
	}
	return n * mult
}
