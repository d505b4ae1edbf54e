package hostcaps_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
)

// fakeHugePages points hostcaps at a pool of 2 MiB pages with free and
// reserved pages, and a mount table holding mounts.
func fakeHugePages(t *testing.T, free, resv, mounts string) {
	dir := t.TempDir()
	pool := filepath.Join(dir, "hugepages-2048kB")
	_ = os.MkdirAll(pool, 0o755)
	_ = os.WriteFile(filepath.Join(pool, "free_hugepages"), []byte(free+"\n"), 0o644)
	_ = os.WriteFile(filepath.Join(pool, "resv_hugepages"), []byte(resv+"\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "mounts"), []byte(mounts), 0o644)
	old := hostcaps.HugePageHost
	hostcaps.HugePageHost.Pools, hostcaps.HugePageHost.Mounts = dir, filepath.Join(dir, "mounts")
	t.Cleanup(func() { hostcaps.HugePageHost = old })
}

func TestCheckHugePages(t *testing.T) {
	mounted := "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
	vm256 := vm.HugePages{PageKiB: 2048, Bytes: 256 << 20} // 128 pages
	for _, tc := range []struct {
		name, free, resv, mounts string
		want                     error
	}{
		{"enough", "200", "72", mounted, nil},
		{"default page size mount", "128", "0", "none /dev/hugepages hugetlbfs rw 0 0\n", nil},
		{"reserved by others", "200", "73", mounted, errdefs.ErrResourceExhausted},
		{"none free", "0", "0", mounted, errdefs.ErrResourceExhausted},
		{"no hugetlbfs", "200", "0", "proc /proc proc rw 0 0\n", errdefs.ErrFailedPrecondition},
		{"1G mount only", "200", "0", "hugetlbfs /mnt hugetlbfs rw,pagesize=1024M 0 0\n", errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeHugePages(t, tc.free, tc.resv, tc.mounts)
			err := hostcaps.CheckHugePages(vm256)
			if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), "hugepage_limits")) {
				t.Fatalf("CheckHugePages: %v, want %v naming hugepage_limits", err, tc.want)
			}
		})
	}
	if err := hostcaps.CheckHugePages(vm.HugePages{}); err != nil {
		t.Fatalf("a VM without huge pages: %v", err)
	}
}
