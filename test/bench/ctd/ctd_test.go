package ctd

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// bedConfig is the shape of the bed's containerd config (test/bed/up.sh).
const bedConfig = `version = 4
root = "/var/lib/crimux-testbed/containerd"
state = "/run/crimux-testbed/containerd"
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs"]

[plugins.'io.containerd.server.v1.grpc']
  address = "/run/crimux-testbed/containerd/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "/run/crimux-testbed/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "/run/crimux-testbed/containerd/s"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "/run/crimux-testbed/containerd/nri/nri.sock"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "/run/crimux-testbed/runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc2]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc2.options]
        BinaryName = "/usr/sbin/runc"
        Root = "/run/crimux-testbed/runc"
`

func TestConfigTakesThePathsOfTheRun(t *testing.T) {
	out, err := Config([]byte(bedConfig), "/var/lib/crimux-bench-7/containerd", "/run/crimux-bench/ctd-7")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "crimux-testbed") {
		t.Errorf("a path of the bed's containerd is left:\n%s", out)
	}
	var m map[string]any
	if err := toml.Unmarshal(out, &m); err != nil {
		t.Fatalf("the config does not parse: %v\n%s", err, out)
	}
	get := func(path ...string) any {
		var v any = m
		for _, k := range path {
			v = v.(map[string]any)[k]
		}
		return v
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"root"}, "/var/lib/crimux-bench-7/containerd"},
		{[]string{"state"}, "/run/crimux-bench/ctd-7"},
		{[]string{"version"}, int64(4)},
		{[]string{"plugins", "io.containerd.server.v1.grpc", "address"}, "/run/crimux-bench/ctd-7/containerd.sock"},
		{[]string{"plugins", "io.containerd.server.v1.ttrpc", "address"}, "/run/crimux-bench/ctd-7/containerd.sock.ttrpc"},
		{[]string{"plugins", "io.containerd.shim.v1.manager", "socket_dir"}, "/run/crimux-bench/ctd-7/s"},
		{[]string{"plugins", "io.containerd.nri.v1.nri", "socket_path"}, "/run/crimux-bench/ctd-7/nri.sock"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc2", "options", "Root"}, "/run/crimux-bench/ctd-7/runc"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options", "BinaryName"}, "/usr/sbin/runc"},
		{[]string{"plugins", "io.containerd.cri.v1.images", "snapshotter"}, "overlayfs"},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "restrict_oom_score_adj"}, true},
	} {
		if got := get(c.path...); got != c.want {
			t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	if len(StateDir("1234567890")+"/s") > 42 {
		t.Errorf("shim socket dir %s is over containerd's 42 characters", StateDir("1234567890")+"/s")
	}
}

func TestConfigRefusesAConfigWithoutItsSockets(t *testing.T) {
	if _, err := Config([]byte("version = 4\n[plugins.'io.containerd.cri.v1.images']\nsnapshotter = \"overlayfs\"\n"), "/r", "/s"); err == nil || !strings.Contains(err.Error(), "io.containerd.server.v1.grpc") {
		t.Fatalf("err = %v, want one naming the missing table", err)
	}
}
