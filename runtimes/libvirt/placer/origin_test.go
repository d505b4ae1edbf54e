package placer

import "testing"

func TestStartedFor(t *testing.T) {
	const dom = "crimux-b8f5"
	scope := `/machine.slice/machine-qemu\x2d1\x2dcrimux\x2db8f5.scope`
	tests := []struct {
		name, got, launcher string
		want                bool
	}{
		{"beside libvirtd (v2)", "0::/system.slice/libvirtd.service\n", "0::/system.slice/libvirtd.service\n", true},
		{"machined's scope of this domain", "0::" + scope + "\n", "0::/system.slice/libvirtd.service\n", true},
		{"a later start (N=12)", `0::/machine.slice/machine-qemu\x2d12\x2dcrimux\x2db8f5.scope`, "0::/system.slice/libvirtd.service", true},
		{"another domain's scope", `0::/machine.slice/machine-qemu\x2d1\x2dcrimux\x2dother.scope`, "0::/system.slice/libvirtd.service", false},
		{"a pod's cgroup", "0::/kubepods.slice/kubepods-podx.slice/crimux-other\n", "0::/system.slice/libvirtd.service\n", false},
		{"no machine number", `0::/machine.slice/machine-qemu\x2d\x2dcrimux\x2db8f5.scope`, "0::/system.slice/libvirtd.service", false},
		{"unescaped name", "0::/machine.slice/machine-qemu-1-crimux-b8f5.scope", "0::/system.slice/libvirtd.service", false},
		{"hybrid: scope in name=systemd, libvirtd's elsewhere",
			"1:name=systemd:" + scope + "\n2:cpu,cpuacct:/\n0::" + scope + "\n",
			"1:name=systemd:/system.slice/libvirtd.service\n2:cpu,cpuacct:/\n0::/system.slice/libvirtd.service\n", true},
		{"hybrid: a v1 hierarchy elsewhere",
			"1:name=systemd:" + scope + "\n2:cpu,cpuacct:/kubepods\n0::" + scope + "\n",
			"1:name=systemd:/system.slice/libvirtd.service\n2:cpu,cpuacct:/\n0::/system.slice/libvirtd.service\n", false},
		{"fewer hierarchies", "0::/system.slice/libvirtd.service\n", "1:cpu:/\n0::/system.slice/libvirtd.service\n", false},
		{"empty", "", "0::/\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := startedFor(tc.got, tc.launcher, dom); got != tc.want {
				t.Errorf("startedFor(%q, %q) = %v, want %v", tc.got, tc.launcher, got, tc.want)
			}
		})
	}
}

func TestUnitNameEscape(t *testing.T) {
	for in, want := range map[string]string{
		"crimux-ab12": `crimux\x2dab12`,
		"a.b_c:d":     "a.b_c:d",
		".x":          `\x2ex`,
		"a/b":         "a-b",
		"a b":         `a\x20b`,
	} {
		if got := unitNameEscape(in); got != want {
			t.Errorf("unitNameEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
