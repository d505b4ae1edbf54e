package cgroup

import (
	"reflect"
	"testing"
)

var (
	hybridLayout = Layout{Hierarchies: []Hierarchy{
		{Mount: "/sys/fs/cgroup/cpu", Controllers: []string{"cpu"}},
		{Mount: "/sys/fs/cgroup/cpuacct", Controllers: []string{"cpuacct"}},
		{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
		{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
		{Mount: "/sys/fs/cgroup/unified", Unified: true, Controllers: []string{"hugetlb"}},
	}}
	comountedLayout = Layout{Hierarchies: []Hierarchy{
		{Mount: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
		{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
	}}
	v2Layout = Layout{Hierarchies: []Hierarchy{
		{Mount: "/sys/fs/cgroup", Unified: true, Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}},
	}}
	// memory bound to v1, cpu left to the unified hierarchy.
	splitLayout = Layout{Hierarchies: []Hierarchy{
		{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
		{Mount: "/sys/fs/cgroup/unified", Unified: true, Controllers: []string{"cpu"}},
	}}
	noControllerLayout = Layout{Hierarchies: []Hierarchy{
		{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
	}}
)

func TestValues(t *testing.T) {
	full := Spec{Parent: "/kubepods/burstable/pod1", Name: "crimux-vm-1",
		CPUQuota: 50000, CPUPeriod: 100000, CPUShares: 512, MemoryLimit: 256 << 20}
	unlimited := Spec{Parent: "kubepods-besteffort-pod1.slice", Name: "crimux-vm-1"}
	for _, tc := range []struct {
		name    string
		spec    Spec
		layout  Layout
		want    []Value
		wantErr bool
	}{
		{name: "hybrid", spec: full, layout: hybridLayout, want: []Value{
			{"/sys/fs/cgroup/cpu", "cpu.shares", "512"},
			{"/sys/fs/cgroup/cpu", "cpu.cfs_period_us", "100000"},
			{"/sys/fs/cgroup/cpu", "cpu.cfs_quota_us", "50000"},
			{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "268435456"},
		}},
		{name: "hybrid unlimited", spec: unlimited, layout: hybridLayout, want: []Value{
			{"/sys/fs/cgroup/cpu", "cpu.cfs_quota_us", "-1"},
			{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "-1"},
		}},
		{name: "comounted", spec: full, layout: comountedLayout, want: []Value{
			{"/sys/fs/cgroup/cpu,cpuacct", "cpu.shares", "512"},
			{"/sys/fs/cgroup/cpu,cpuacct", "cpu.cfs_period_us", "100000"},
			{"/sys/fs/cgroup/cpu,cpuacct", "cpu.cfs_quota_us", "50000"},
			{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "268435456"},
		}},
		{name: "v2", spec: full, layout: v2Layout, want: []Value{
			{"/sys/fs/cgroup", "cpu.weight", "59"},
			{"/sys/fs/cgroup", "cpu.max", "50000 100000"},
			{"/sys/fs/cgroup", "memory.max", "268435456"},
		}},
		{name: "v2 unlimited", spec: unlimited, layout: v2Layout, want: []Value{
			{"/sys/fs/cgroup", "cpu.max", "max 100000"},
			{"/sys/fs/cgroup", "memory.max", "max"},
		}},
		{name: "v2 quota without period", spec: Spec{Parent: "/p", Name: "crimux-a", CPUQuota: 20000}, layout: v2Layout, want: []Value{
			{"/sys/fs/cgroup", "cpu.max", "20000 100000"},
			{"/sys/fs/cgroup", "memory.max", "max"},
		}},
		{name: "split: cpu in unified, memory in v1", spec: full, layout: splitLayout, want: []Value{
			{"/sys/fs/cgroup/unified", "cpu.weight", "59"},
			{"/sys/fs/cgroup/unified", "cpu.max", "50000 100000"},
			{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "268435456"},
		}},
		{name: "limits without controllers", spec: full, layout: noControllerLayout, wantErr: true},
		{name: "no limits, no controllers", spec: unlimited, layout: noControllerLayout, want: nil},
		{name: "invalid spec", spec: Spec{Parent: "/p", Name: "vm"}, layout: hybridLayout, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.spec.Values(tc.layout)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Values() = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Values():\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// The v1 → v2 weight conversion is runc's (opencontainers/cgroups ≥ 0.0.5,
// through containerd/cgroups): quadratic in log2(shares), fitting min,
// default and max.
func TestSharesToWeight(t *testing.T) {
	for shares, weight := range map[uint64]string{
		2: "1", 1024: "100", 262144: "10000", 512: "59", 2048: "174", 100: "17",
	} {
		vals, err := Spec{Parent: "/p", Name: "crimux-a", CPUShares: shares}.Values(v2Layout)
		if err != nil {
			t.Fatal(err)
		}
		if vals[0].File != "cpu.weight" || vals[0].Data != weight {
			t.Errorf("shares %d: %v, want cpu.weight %s", shares, vals[0], weight)
		}
	}
}

func TestLeafDirs(t *testing.T) {
	dirs, err := hybridLayout.LeafDirs(Spec{Parent: "kubepods-pod1.slice", Name: "crimux-vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/sys/fs/cgroup/cpu/kubepods.slice/kubepods-pod1.slice/crimux-vm-1",
		"/sys/fs/cgroup/cpuacct/kubepods.slice/kubepods-pod1.slice/crimux-vm-1",
		"/sys/fs/cgroup/memory/kubepods.slice/kubepods-pod1.slice/crimux-vm-1",
		"/sys/fs/cgroup/systemd/kubepods.slice/kubepods-pod1.slice/crimux-vm-1",
		"/sys/fs/cgroup/unified/kubepods.slice/kubepods-pod1.slice/crimux-vm-1",
	}
	if !reflect.DeepEqual(dirs, want) {
		t.Errorf("LeafDirs:\n got %v\nwant %v", dirs, want)
	}
}
