package vm

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestResourcesFrom(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name    string
		r       *runtimeapi.LinuxContainerResources
		want    Resources
		errWord string
	}{
		{"limit rounds up", &runtimeapi.LinuxContainerResources{CpuQuota: 150000, CpuPeriod: 100000, MemoryLimitInBytes: 128 * mib}, Resources{VCPUs: 2, MemoryMiB: 128}, ""},
		{"request when no limit", &runtimeapi.LinuxContainerResources{CpuShares: 1536, MemoryLimitInBytes: 256 * mib}, Resources{VCPUs: 2, MemoryMiB: 256}, ""},
		{"one vCPU by default", &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 64 * mib}, Resources{VCPUs: 1, MemoryMiB: 64}, ""},
		{"no memory limit", &runtimeapi.LinuxContainerResources{CpuShares: 1024}, Resources{}, "memory_limit_in_bytes"},
		{"nil resources", nil, Resources{}, "memory_limit_in_bytes"},
		{"too little memory", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: mib}, Resources{}, "memory_limit_in_bytes"},
		{"huge pages hold the RAM", &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 64 * mib,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "1GB"}, {PageSize: "2MB", Limit: 256 * mib}}},
			Resources{VCPUs: 1, MemoryMiB: 256, HugePages: HugePages{PageKiB: 2048, Bytes: 256 * mib}}, ""},
		{"two huge page sizes", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mib,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "1GB", Limit: 1 << 30}, {PageSize: "2MB", Limit: 256 * mib}}},
			Resources{}, "hugepage_limits"},
		{"part of a page", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mib,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 255 * mib}}}, Resources{}, "hugepage_limits"},
		{"odd page size", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 * mib,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2XB", Limit: 256 * mib}}}, Resources{}, "hugepage_limits"},
		{"too many vCPUs", &runtimeapi.LinuxContainerResources{CpuQuota: 1000 * 100000, CpuPeriod: 100000, MemoryLimitInBytes: 128 * mib}, Resources{}, "cpu_quota"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResourcesFrom(c.r)
			if c.errWord != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.errWord) {
					t.Fatalf("err %v, want InvalidArgument naming %s", err, c.errWord)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestParseAnnotations(t *testing.T) {
	cases := []struct {
		name           string
		pod, container map[string]string
		want           string
		bad            bool
	}{
		{"none", nil, nil, "", false},
		{"pod", map[string]string{AnnotationKernelArgs: "console=ttyS0  quiet"}, nil, "console=ttyS0 quiet", false},
		{"container wins", map[string]string{AnnotationKernelArgs: "a"}, map[string]string{AnnotationKernelArgs: "b"}, "b", false},
		{"quoted spaces kept", nil, map[string]string{AnnotationKernelArgs: `init="/bin/sh  -c"`}, `init="/bin/sh  -c"`, false},
		{"newline", nil, map[string]string{AnnotationKernelArgs: "a\nb"}, "", true},
		{"unbalanced quote", nil, map[string]string{AnnotationKernelArgs: `a="b`}, "", true},
		{"non-ASCII", nil, map[string]string{AnnotationKernelArgs: "é"}, "", true},
		{"too long", nil, map[string]string{AnnotationKernelArgs: strings.Repeat("a", 3000)}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := ParseAnnotations(c.pod, c.container)
			if c.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), AnnotationKernelArgs) {
					t.Fatalf("err %v, want InvalidArgument naming the annotation", err)
				}
				return
			}
			if err != nil || o.KernelArgs != c.want {
				t.Fatalf("got %q, %v; want %q", o.KernelArgs, err, c.want)
			}
		})
	}
}

// FuzzParseKernelArgs: accepted lines are printable ASCII, bounded, with
// balanced quotes, and parsing is idempotent.
func FuzzParseKernelArgs(f *testing.F) {
	for _, s := range []string{"console=ttyS0", `a="b c"`, "\x00", "a\tb", `"`, "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := ParseKernelArgs(s)
		if err != nil {
			return
		}
		if len(out) > maxKernelArgs || strings.Count(out, `"`)%2 != 0 {
			t.Fatalf("accepted %q as %q", s, out)
		}
		for _, r := range out {
			if r < 0x20 || r >= 0x7f {
				t.Fatalf("accepted a control or non-ASCII character: %q", out)
			}
		}
		again, err := ParseKernelArgs(out)
		if err != nil || again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", s, out, again, err)
		}
	})
}
