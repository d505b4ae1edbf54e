package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStatsFromFiles: CPU time, the memory charge and the working set
// (charge less inactive file pages, never below zero) of a v1 and a v2
// leaf, read from the files the kernel keeps.
func TestStatsFromFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout func(root string) Layout
		files  map[string]string
		want   Usage
	}{
		{"v1", func(root string) Layout {
			return Layout{Hierarchies: []Hierarchy{
				{Mount: filepath.Join(root, "cpuacct"), Controllers: []string{"cpuacct"}},
				{Mount: filepath.Join(root, "memory"), Controllers: []string{"memory"}},
			}}
		}, map[string]string{
			"cpuacct/kubepods/pod1/crimux-c1/cpuacct.usage":        "7000\n",
			"memory/kubepods/pod1/crimux-c1/memory.usage_in_bytes": "1000\n",
			"memory/kubepods/pod1/crimux-c1/memory.stat":           "cache 5\ntotal_inactive_file 300\n",
		}, Usage{CPUNanos: 7000, MemoryBytes: 1000, WorkingSetBytes: 700}},
		{"v2, inactive above the charge", func(root string) Layout {
			return Layout{Hierarchies: []Hierarchy{{Mount: root, Unified: true, Controllers: []string{"cpu", "memory"}}}}
		}, map[string]string{
			"kubepods/pod1/crimux-c1/cpu.stat":       "usage_usec 3\nuser_usec 2\n",
			"kubepods/pod1/crimux-c1/memory.current": "100\n",
			"kubepods/pod1/crimux-c1/memory.stat":    "anon 1\ninactive_file 200\n",
		}, Usage{CPUNanos: 3000, MemoryBytes: 100, WorkingSetBytes: 0}},
	} {
		root := t.TempDir()
		for name, content := range tc.files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := tc.layout(root).Stats(Spec{Parent: "/kubepods/pod1", Name: "crimux-c1"})
		if err != nil || got != tc.want {
			t.Errorf("%s: Stats = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
