package cgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeCpuset makes dir under mount with cpus and mems, as a hierarchy
// would hold them.
func writeCpuset(t *testing.T, mount, dir, cpus, mems string) {
	t.Helper()
	d := filepath.Join(mount, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string]string{"cpuset.cpus": cpus, "cpuset.mems": mems} {
		if err := os.WriteFile(filepath.Join(d, file), []byte(data+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCpusetValuesV1(t *testing.T) {
	mount := t.TempDir()
	writeCpuset(t, mount, "/", "0-3", "0")
	writeCpuset(t, mount, "/kubepods", "", "") // made without copying: the root's
	l := Layout{Hierarchies: []Hierarchy{{Mount: mount, Controllers: []string{"cpuset"}}}}
	pinned := Spec{Parent: "/kubepods/pod1", Name: "crimux-vm-1", CPUs: "2-3", Mems: "0"}
	got, err := pinned.cpusetValues(l)
	want := []Value{{mount, "cpuset.mems", "0"}, {mount, "cpuset.cpus", "2-3"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("pinned: %v, %v; want %v", got, err, want)
	}
	// Unpinned: the nearest ancestor's lists, so an update lifts a pinning.
	writeCpuset(t, mount, "/kubepods/pod1", "1-3", "")
	got, err = Spec{Parent: "/kubepods/pod1", Name: "crimux-vm-1"}.cpusetValues(l)
	want = []Value{{mount, "cpuset.mems", "0"}, {mount, "cpuset.cpus", "1-3"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("unpinned: %v, %v; want %v", got, err, want)
	}
}

func TestCpusetValuesUnified(t *testing.T) {
	mount := t.TempDir()
	l := Layout{Hierarchies: []Hierarchy{{Mount: mount, Unified: true, Controllers: []string{"cpuset", "cpu"}}}}
	s := Spec{Parent: "/kubepods/pod1", Name: "crimux-vm-1"}
	if got, err := s.cpusetValues(l); err != nil || len(got) != 0 {
		t.Fatalf("unpinned new leaf: %v, %v; want nothing written", got, err)
	}
	writeCpuset(t, mount, "/kubepods/pod1/crimux-vm-1", "1", "0")
	want := []Value{{mount, "cpuset.mems", ""}, {mount, "cpuset.cpus", ""}}
	if got, err := s.cpusetValues(l); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("unpinned leaf that was pinned: %v, %v; want %v (inherit)", got, err, want)
	}
}

func TestCpusetRefused(t *testing.T) {
	s := Spec{Parent: "/kubepods/pod1", Name: "crimux-vm-1", CPUs: "1"}
	if _, err := s.Values(noControllerLayout); err == nil {
		t.Fatal("a cpuset without a cpuset controller was accepted")
	}
	s.CPUs = "1;rm"
	if err := s.Validate(); err == nil {
		t.Fatal("a cpuset that is no list was accepted")
	}
}

func TestListToBits(t *testing.T) {
	for list, want := range map[string][]byte{"": nil, "0": {1}, "1": {2}, "0-2,9": {7, 2}, "8": {0, 1}} {
		got, err := listToBits(list)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("listToBits(%q) = %v, %v; want %v", list, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-", ",", "70000"} {
		if _, err := listToBits(bad); err == nil {
			t.Errorf("listToBits(%q) accepted", bad)
		}
	}
}
