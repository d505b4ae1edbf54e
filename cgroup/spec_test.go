package cgroup

import "testing"

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		name, parent, leaf string
		wantParent         string
		wantLeaf           string
		wantErr            bool
	}{
		{name: "cgroupfs", parent: "/kubepods/burstable/pod123", leaf: "crimux-vm-1",
			wantParent: "/kubepods/burstable/pod123", wantLeaf: "/kubepods/burstable/pod123/crimux-vm-1"},
		{name: "cgroupfs unclean", parent: "/kubepods//besteffort/pod9/", leaf: "crimux-vm-1",
			wantParent: "/kubepods/besteffort/pod9", wantLeaf: "/kubepods/besteffort/pod9/crimux-vm-1"},
		{name: "systemd", parent: "kubepods-burstable-pod1234_5678.slice", leaf: "crimux-vm-1",
			wantParent: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice",
			wantLeaf:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/crimux-vm-1"},
		{name: "systemd guaranteed", parent: "kubepods-pod1.slice", leaf: "crimux-vm-2",
			wantParent: "/kubepods.slice/kubepods-pod1.slice", wantLeaf: "/kubepods.slice/kubepods-pod1.slice/crimux-vm-2"},
		{name: "systemd single", parent: "machine.slice", leaf: "crimux-x",
			wantParent: "/machine.slice", wantLeaf: "/machine.slice/crimux-x"},
		{name: "empty parent", parent: "", leaf: "crimux-vm-1", wantErr: true},
		{name: "root parent", parent: "/", leaf: "crimux-vm-1", wantErr: true},
		{name: "root slice", parent: "-.slice", leaf: "crimux-vm-1", wantErr: true},
		{name: "bad slice", parent: "a--b.slice", leaf: "crimux-vm-1", wantErr: true},
		{name: "relative parent", parent: "kubepods/pod1", leaf: "crimux-vm-1", wantErr: true},
		{name: "dotdot parent", parent: "/kubepods/../etc", leaf: "crimux-vm-1", wantErr: true},
		{name: "foreign leaf", parent: "/kubepods/pod1", leaf: "vm-1", wantErr: true},
		{name: "bare prefix", parent: "/kubepods/pod1", leaf: "crimux-", wantErr: true},
		{name: "leaf with slash", parent: "/kubepods/pod1", leaf: "crimux-a/b", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, leaf, err := Spec{Parent: tc.parent, Name: tc.leaf}.Paths()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Paths() = %q, %q; want an error", parent, leaf)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if parent != tc.wantParent || leaf != tc.wantLeaf {
				t.Errorf("Paths() = %q, %q; want %q, %q", parent, leaf, tc.wantParent, tc.wantLeaf)
			}
		})
	}
}
