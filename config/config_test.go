package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultTOMLParsesToDefault(t *testing.T) {
	got, err := Parse([]byte(DefaultTOML))
	if err != nil {
		t.Fatalf("Parse(DefaultTOML): %v", err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(DefaultTOML) =\n%+v\nwant Default() =\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultTOML does not validate: %v", err)
	}
}

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want func(*Config) // applied to Default() to get the expected config
	}{
		{
			name: "empty file is the defaults",
			toml: "",
			want: func(*Config) {},
		},
		{
			name: "a partial section keeps the other defaults of that section",
			toml: "[containerd]\nendpoint = \"unix:///run/other.sock\"\n",
			want: func(c *Config) { c.Containerd.Endpoint = "unix:///run/other.sock" },
		},
		{
			name: "duration",
			toml: "[containerd]\ncall_timeout = \"15s\"\n",
			want: func(c *Config) { c.Containerd.CallTimeout = Duration{15 * time.Second} },
		},
		{
			name: "kubernetes",
			toml: "[kubernetes]\nkubeconfig = \"/etc/crimux/node-agent.kubeconfig\"\nnode_name = \"node-1\"\n",
			want: func(c *Config) {
				c.Kubernetes = Kubernetes{Kubeconfig: "/etc/crimux/node-agent.kubeconfig", NodeName: "node-1"}
			},
		},
		{
			name: "runtimes replace the default runtime list",
			toml: `
[[runtime]]
name = "containerd"
type = "container"
primary = true

[[runtime]]
name = "vm"
type = "vm"
handlers = ["vm", "kvm"]
`,
			want: func(c *Config) {
				c.Runtimes = []Runtime{
					{Name: "containerd", Type: TypeContainer, Primary: true},
					{Name: "vm", Type: TypeVM, Handlers: []string{"vm", "kvm"}},
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.toml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name    string
		toml    string
		wantErr []string // substrings of the error
	}{
		{"unknown top-level key", `listne = "/x.sock"`, []string{"unknown keys", "listne"}},
		{"unknown key in a section", "[containerd]\ncall_timeuot = \"1s\"\n", []string{"unknown keys", "containerd.call_timeuot"}},
		{"unknown key in a runtime", "[[runtime]]\nname = \"x\"\nprimray = true\n", []string{"unknown keys", "primray"}},
		{"unknown section", "[libvrt]\nuri = \"qemu:///system\"\n", []string{"unknown keys", "libvrt"}},
		{"unknown key in kubernetes", "[kubernetes]\nnodename = \"n\"\n", []string{"unknown keys", "kubernetes.nodename"}},
		{"bad duration", "[containerd]\ncall_timeout = \"soon\"\n", []string{"parse config", "soon"}},
		{"not TOML", "listen = ", []string{"parse config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tt.toml)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	containerd := Runtime{Name: "containerd", Type: TypeContainer, Handlers: []string{"runc"}, Primary: true}
	vm := Runtime{Name: "vm", Type: TypeVM, Handlers: []string{"vm"}}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr []string // substrings of the error; none: valid
	}{
		{name: "containerd and vm", edit: func(c *Config) { c.Runtimes = []Runtime{containerd, vm} }},
		{name: "vm primary", edit: func(c *Config) {
			a, b := containerd, vm
			a.Primary, b.Primary = false, true
			c.Runtimes = []Runtime{a, b}
		}},
		{name: "runtime endpoint", edit: func(c *Config) { c.Runtimes[0].Endpoint = "unix:///run/k.sock" }},
		{
			name:    "no primary",
			edit:    func(c *Config) { c.Runtimes = []Runtime{{Name: "containerd", Type: TypeContainer}, vm} },
			wantErr: []string{"exactly one runtime must be primary", "found 0"},
		},
		{
			name: "two primaries",
			edit: func(c *Config) {
				v := vm
				v.Primary = true
				c.Runtimes = []Runtime{containerd, v}
			},
			wantErr: []string{"exactly one runtime must be primary", "found 2", "containerd", "vm"},
		},
		{
			name: "handler served twice",
			edit: func(c *Config) {
				v := vm
				v.Handlers = []string{"vm", "runc"}
				c.Runtimes = []Runtime{containerd, v}
			},
			wantErr: []string{`runtime[1] "vm"`, `handler "runc" is already served by runtime "containerd"`},
		},
		{
			name: "unknown type",
			edit: func(c *Config) {
				c.Runtimes = []Runtime{containerd, {Name: "gvisor", Type: "sandbox"}}
			},
			wantErr: []string{`runtime[1] "gvisor"`, `unknown type "sandbox"`, "container, vm"},
		},
		{
			name:    "name used twice",
			edit:    func(c *Config) { c.Runtimes = []Runtime{containerd, {Name: "containerd", Type: TypeVM}} },
			wantErr: []string{`runtime[1] "containerd": name used twice`},
		},
		{
			name:    "no runtimes",
			edit:    func(c *Config) { c.Runtimes = nil },
			wantErr: []string{"at least one runtime"},
		},
		{
			name:    "runtime endpoint not unix",
			edit:    func(c *Config) { c.Runtimes[0].Endpoint = "tcp://1.2.3.4:5" },
			wantErr: []string{`runtime[0] "containerd"`, `endpoint "tcp://1.2.3.4:5"`},
		},
		{name: "relative listen", edit: func(c *Config) { c.Listen = "crimux.sock" }, wantErr: []string{"listen", `"crimux.sock"`}},
		{name: "relative state_dir", edit: func(c *Config) { c.StateDir = "state" }, wantErr: []string{"state_dir", `"state"`}},
		{name: "log level", edit: func(c *Config) { c.LogLevel = "trace" }, wantErr: []string{"log_level", `"trace"`}},
		{name: "metrics address", edit: func(c *Config) { c.MetricsAddress = "127.0.0.1:9117" }},
		{name: "bad metrics address", edit: func(c *Config) { c.MetricsAddress = "9117" }, wantErr: []string{"metrics_address", `"9117"`}},
		{name: "accel", edit: func(c *Config) { c.Libvirt.Accel = "hvf" }, wantErr: []string{"libvirt.accel", `"hvf"`}},
		{name: "gc interval", edit: func(c *Config) { c.Libvirt.GCInterval = Duration{time.Millisecond} }, wantErr: []string{"libvirt.gc_interval"}},
		{name: "guest boot timeout", edit: func(c *Config) { c.Libvirt.GuestBootTimeout = Duration{-time.Second} }, wantErr: []string{"libvirt.guest_boot_timeout", "negative"}},
		{name: "network", edit: func(c *Config) { c.Libvirt.Network = "slirp" }, wantErr: []string{"libvirt.network", `"slirp"`}},
		{name: "cni dirs", edit: func(c *Config) { c.Libvirt.CNIConfDir = "net.d" }, wantErr: []string{"libvirt.cni_conf_dir"}},
		{name: "node agent", edit: func(c *Config) {
			c.Kubernetes = Kubernetes{Kubeconfig: "/etc/crimux/node-agent.kubeconfig", NodeName: "worker-1.example.com"}
		}},
		{name: "node agent, host name as node name", edit: func(c *Config) { c.Kubernetes.Kubeconfig = "/etc/kubeconfig" }},
		{name: "relative kubeconfig", edit: func(c *Config) { c.Kubernetes.Kubeconfig = "kubeconfig" },
			wantErr: []string{"kubernetes.kubeconfig", `"kubeconfig"`}},
		{name: "node name too long", edit: func(c *Config) { c.Kubernetes.NodeName = strings.Repeat("a", 254) },
			wantErr: []string{"kubernetes.node_name", "253"}},
		{name: "zero call timeout", edit: func(c *Config) { c.Containerd.CallTimeout = Duration{} }, wantErr: []string{"containerd.call_timeout"}},
		{
			name: "every error is reported, not only the first",
			edit: func(c *Config) {
				c.LogLevel = "loud"
				c.Runtimes = []Runtime{{Name: "Bad", Type: "x"}}
			},
			wantErr: []string{"log_level", `runtime[0] "Bad": name`, `unknown type "x"`, "primary"},
		},
	}
	for _, name := range []string{"", "VM", "1vm", "vm--x", "vm_x", "vm-", "-vm", "vm x", "vm.x"} {
		tests = append(tests, struct {
			name    string
			edit    func(*Config)
			wantErr []string
		}{
			name: "bad name " + name,
			edit: func(c *Config) {
				c.Runtimes = []Runtime{containerd, {Name: name, Type: TypeVM}}
			},
			wantErr: []string{`runtime[1] "` + name + `": name must be`},
		})
	}
	for _, name := range []string{"Node1", "node_1", "-node", "node-", "node..x", ".node", "node.", "node 1", "nöde"} {
		tests = append(tests, struct {
			name    string
			edit    func(*Config)
			wantErr []string
		}{
			name:    "bad node name " + name,
			edit:    func(c *Config) { c.Kubernetes.NodeName = name },
			wantErr: []string{`kubernetes.node_name: "` + name + `" must be a DNS-1123 subdomain`},
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			tt.edit(&cfg)
			err := cfg.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// Validate must not change the config it checks (cri-o's mutating
// Validate is what the style guide warns about).
func TestValidateIsPure(t *testing.T) {
	cfg := Default()
	cfg.Runtimes = append(cfg.Runtimes, Runtime{Name: "Bad", Type: "x", Handlers: []string{"runc"}, Primary: true})
	before := Default()
	before.Runtimes = append(before.Runtimes, Runtime{Name: "Bad", Type: "x", Handlers: []string{"runc"}, Primary: true})
	_ = cfg.Validate()
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("Validate changed the config:\n%+v\nwas\n%+v", cfg, before)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	good := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(good, []byte("log_level = \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("log_levle = \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		explicit  bool
		wantLevel string
		wantErr   string
	}{
		{name: "missing default file: defaults", path: missing, wantLevel: "info"},
		{name: "missing explicit file: error", path: missing, explicit: true, wantErr: "missing.toml"},
		{name: "file over defaults", path: good, explicit: true, wantLevel: "debug"},
		{name: "unknown key", path: bad, wantErr: "log_levle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(tt.path, tt.explicit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if cfg.LogLevel != tt.wantLevel {
				t.Errorf("log_level = %q, want %q", cfg.LogLevel, tt.wantLevel)
			}
			if cfg.Listen != Default().Listen {
				t.Errorf("listen = %q, want the default", cfg.Listen)
			}
		})
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1m30s")); err != nil || d.Duration != 90*time.Second {
		t.Fatalf("UnmarshalText(1m30s) = %v, %v", d.Duration, err)
	}
	b, err := d.MarshalText()
	if err != nil || string(b) != "1m30s" {
		t.Errorf("MarshalText = %q, %v; want 1m30s", b, err)
	}
	if err := d.UnmarshalText([]byte("10")); err == nil {
		t.Errorf("UnmarshalText(10) succeeded; a duration needs a unit")
	}
}

// TestListenTakesAUnixURL: listen, like every endpoint flag and
// kubelet's, takes unix:///path as well as the path.
func TestListenTakesAUnixURL(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/x.sock": "/run/x.sock",
		"/run/x.sock":        "/run/x.sock",
		"unix://run/x.sock":  "unix://run/x.sock", // relative: Validate refuses it
		"tcp://1.2.3.4:5":    "tcp://1.2.3.4:5",
	} {
		if got := SocketPath(in); got != want {
			t.Errorf("SocketPath(%q) = %q, want %q", in, got, want)
		}
	}
	cfg, err := Parse([]byte("listen = \"unix:///run/x.sock\"\n"))
	if err != nil || cfg.Listen != "/run/x.sock" || cfg.Validate() != nil {
		t.Fatalf("listen = unix:///run/x.sock: %q, %v, %v", cfg.Listen, err, cfg.Validate())
	}
}
