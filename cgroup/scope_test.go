package cgroup

import (
	"math"
	"testing"
)

func propMap(s Spec) map[string]any {
	out := map[string]any{}
	for _, p := range ScopeProperties(s) {
		out[p.Name] = p.Value.Value()
	}
	return out
}

func TestScopeProperties(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want map[string]any
	}{
		{"limits", Spec{CPUQuota: 50000, CPUPeriod: 100000, CPUShares: 1024, MemoryLimit: 805306368},
			map[string]any{"CPUQuotaPerSecUSec": uint64(500000), "CPUQuotaPeriodUSec": uint64(100000),
				"CPUWeight": uint64(100), "MemoryMax": uint64(805306368)}},
		{"no limits: infinity", Spec{},
			map[string]any{"CPUQuotaPerSecUSec": uint64(math.MaxUint64), "MemoryMax": uint64(math.MaxUint64)}},
		{"quota rounded up to 10 ms per second", Spec{CPUQuota: 33333, CPUPeriod: 100000},
			map[string]any{"CPUQuotaPerSecUSec": uint64(340000), "CPUQuotaPeriodUSec": uint64(100000)}},
		{"default period", Spec{CPUQuota: 200000},
			map[string]any{"CPUQuotaPerSecUSec": uint64(2000000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := propMap(tc.spec)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if _, ok := got["CPUWeight"]; ok != (tc.spec.CPUShares > 0) {
				t.Errorf("CPUWeight set = %v with shares %d", ok, tc.spec.CPUShares)
			}
			if _, ok := got["CPUQuotaPeriodUSec"]; ok != (tc.spec.CPUPeriod > 0) {
				t.Errorf("CPUQuotaPeriodUSec set = %v with period %d", ok, tc.spec.CPUPeriod)
			}
		})
	}
}

func TestLeafPathScoped(t *testing.T) {
	v2 := Layout{Hierarchies: []Hierarchy{{Mount: "/sys/fs/cgroup", Unified: true, Controllers: []string{"cpu", "memory"}}}}
	sd := v2
	sd.Systemd = true
	slice := Spec{Parent: "kubepods-burstable-pod1.slice", Name: "crimux-vm-1"}
	path := Spec{Parent: "/kubepods/burstable/pod1", Name: "crimux-vm-1"}
	// kubelet's systemd driver sends the slice expanded (cm.CgroupName's
	// ToSystemd): the same pod slice, so the same scope.
	expanded := Spec{Parent: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", Name: "crimux-vm-1"}
	// A path whose last element is a slice it is not the expansion of is
	// no systemd slice: a directory.
	odd := Spec{Parent: "/kubepods/kubepods-burstable-pod1.slice", Name: "crimux-vm-1"}
	tests := []struct {
		name string
		l    Layout
		s    Spec
		want string
	}{
		{"systemd, slice parent: a scope", sd, slice,
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crimux-vm-1.scope"},
		{"systemd, slice parent as kubelet expands it: a scope", sd, expanded,
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crimux-vm-1.scope"},
		{"systemd, cgroupfs parent: a directory", sd, path, "/kubepods/burstable/pod1/crimux-vm-1"},
		{"systemd, a path ending in a slice it does not expand: a directory", sd, odd, "/kubepods/kubepods-burstable-pod1.slice/crimux-vm-1"},
		{"no systemd, slice parent: a directory", v2, slice,
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crimux-vm-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.l.LeafPath(tc.s)
			if err != nil || got != tc.want {
				t.Errorf("LeafPath = %q, %v; want %q", got, err, tc.want)
			}
			dirs, _ := tc.l.LeafDirs(tc.s)
			if len(dirs) != 1 || dirs[0] != "/sys/fs/cgroup"+tc.want {
				t.Errorf("LeafDirs = %v", dirs)
			}
		})
	}
	// On the systemd driver Create makes nothing (the scope comes with
	// its first process), so it touches no file here.
	if err := sd.Create(slice); err != nil {
		t.Errorf("Create on the systemd driver: %v", err)
	}
}
