package cgroup

import (
	"reflect"
	"strings"
	"testing"
)

// This host (Debian 12, no systemd): v1 controllers one per mount, plus
// the unified hierarchy.
const hybridMountinfo = `22 1 254:1 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// A systemd host in v1 mode: comounted controllers, a bind mount of one
// hierarchy and a container's view of a sub-directory.
const systemdV1Mountinfo = `25 20 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
31 25 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
32 25 0:30 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,net_cls,net_prio
33 25 0:31 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,cpuset,clone_children
90 80 0:29 / /mnt/memory\040bind rw,relatime - cgroup cgroup rw,memory
91 80 0:28 /kubepods/pod1 /run/ctr/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
`

const v2Mountinfo = `24 19 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

func TestParseMountinfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Hierarchy
		mode     string
	}{
		{name: "hybrid, one controller per mount", in: hybridMountinfo, mode: "hybrid", want: []Hierarchy{
			{Mount: "/sys/fs/cgroup/cpu", Controllers: []string{"cpu"}},
			{Mount: "/sys/fs/cgroup/cpuacct", Controllers: []string{"cpuacct"}},
			{Mount: "/sys/fs/cgroup/cpuset", Controllers: []string{"cpuset"}},
			{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
			{Mount: "/sys/fs/cgroup/devices", Controllers: []string{"devices"}},
			{Mount: "/sys/fs/cgroup/freezer", Controllers: []string{"freezer"}},
			{Mount: "/sys/fs/cgroup/blkio", Controllers: []string{"blkio"}},
			{Mount: "/sys/fs/cgroup/pids", Controllers: []string{"pids"}},
			{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
			{Mount: "/sys/fs/cgroup/unified", Unified: true},
		}},
		{name: "systemd v1, comounted, bind mounts", in: systemdV1Mountinfo, mode: "hybrid", want: []Hierarchy{
			{Mount: "/sys/fs/cgroup/unified", Unified: true},
			{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
			{Mount: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
			{Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
			{Mount: "/sys/fs/cgroup/net_cls,net_prio", Controllers: []string{"net_cls", "net_prio"}},
			{Mount: "/sys/fs/cgroup/cpuset", Controllers: []string{"cpuset"}},
		}},
		{name: "pure v2", in: v2Mountinfo, mode: "v2", want: []Hierarchy{
			{Mount: "/sys/fs/cgroup", Unified: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseMountinfo:\n got %+v\nwant %+v", got, tc.want)
			}
			if m := (Layout{Hierarchies: got}).Mode(); m != tc.mode {
				t.Errorf("Mode() = %s, want %s", m, tc.mode)
			}
		})
	}
}

func TestCheckProcCgroup(t *testing.T) {
	const leaf = "/kubepods/pod1/crimux-vm-1"
	placed := "9:name=systemd:" + leaf + "\n4:memory:" + leaf + "\n1:cpu:" + leaf + "\n0::" + leaf + "\n"
	if err := CheckProcCgroup(placed, leaf); err != nil {
		t.Errorf("placed process: %v", err)
	}
	for name, content := range map[string]string{
		"unified left behind": "4:memory:" + leaf + "\n0::/machine/qemu-1.libvirt-qemu\n",
		"in the parent":       "1:cpu:/kubepods/pod1\n",
		"garbage":             "nonsense\n",
		"empty":               "",
	} {
		if err := CheckProcCgroup(content, leaf); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
