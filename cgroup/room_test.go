package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		unified       bool
		want          int64
		limited       bool
	}{
		{name: "v1 limited", content: "268435456\n", want: 256 << 20, limited: true},
		{name: "v1 unlimited", content: "9223372036854771712\n"},
		{name: "v2 limited", content: "134217728\n", unified: true, want: 128 << 20, limited: true},
		{name: "v2 max", content: "max\n", unified: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			file := "memory.limit_in_bytes"
			if tc.unified {
				file = "memory.max"
			}
			dir := filepath.Join(root, "kubepods", "pod1")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			l := Layout{Hierarchies: []Hierarchy{{Mount: root, Unified: tc.unified, Controllers: []string{"memory"}}}}
			got, limited, err := l.MemoryLimit("/kubepods/pod1")
			if err != nil || got != tc.want || limited != tc.limited {
				t.Fatalf("MemoryLimit = %d, %v, %v; want %d, %v", got, limited, err, tc.want, tc.limited)
			}
			if _, limited, err := l.MemoryLimit("/kubepods/none"); err != nil || limited {
				t.Fatalf("a parent that does not exist: %v, %v; want no limit", limited, err)
			}
		})
	}
}
