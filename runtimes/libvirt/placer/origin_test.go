package placer

import (
	"os"
	"path/filepath"
	"testing"
)

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

// fakeProc makes a /proc with processes (pid: comm, mount namespace,
// cgroup) and self in mount namespace self.
func fakeProc(t *testing.T, self string, procs map[string][3]string) string {
	t.Helper()
	dir := t.TempDir()
	mk := func(pid, ns string) {
		if err := os.MkdirAll(filepath.Join(dir, pid, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ns, filepath.Join(dir, pid, "ns", "mnt")); err != nil {
			t.Fatal(err)
		}
	}
	mk("self", self)
	for pid, p := range procs {
		mk(pid, p[1])
		for name, content := range map[string]string{"comm": p[0] + "\n", "cgroup": p[2]} {
			if err := os.WriteFile(filepath.Join(dir, pid, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestLauncherCgroups(t *testing.T) {
	host, node2 := "mnt:[1]", "mnt:[2]"
	procs := map[string][3]string{
		"100": {"libvirtd", host, "4:memory:/host\n"},
		"200": {"libvirtd", node2, "4:memory:/node2\n"},
		"300": {"qemu-system-x86", node2, "4:memory:/node2\n"},
	}
	for _, tc := range []struct {
		name, self, want string
		procs            map[string][3]string
	}{
		{"the host's crimux: the host's libvirtd", host, "4:memory:/host\n", procs},
		{"node two's crimux: its own libvirtd, not the first", node2, "4:memory:/node2\n", procs},
		{"crimux in a mount namespace of its own: the first", "mnt:[3]", "4:memory:/host\n", procs},
		{"virtqemud", host, "0::/system.slice/virtqemud.service\n",
			map[string][3]string{"7": {"virtqemud", host, "0::/system.slice/virtqemud.service\n"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := launcherCgroups(fakeProc(t, tc.self, tc.procs))
			if err != nil || got != tc.want {
				t.Fatalf("launcherCgroups = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := launcherCgroups(fakeProc(t, host, map[string][3]string{"5": {"qemu-system-x86", host, "0::/\n"}})); err == nil {
		t.Fatal("launcherCgroups without libvirtd: no error")
	}
}
