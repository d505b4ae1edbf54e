package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/crimux/crimux/config"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("log_level = \"warn\"\n[libvirt]\naccel = \"kvm\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, cfg config.Config)
		wantErr string
	}{
		{
			name: "file values",
			args: []string{"--config", file},
			check: func(t *testing.T, cfg config.Config) {
				if cfg.LogLevel != "warn" || cfg.Libvirt.Accel != "kvm" || cfg.Listen != config.Default().Listen {
					t.Errorf("cfg = %+v", cfg)
				}
			},
		},
		{
			name: "flags override the file",
			args: []string{"--config", file, "--log-level", "debug", "--vm-accel", "tcg", "--listen", "/tmp/x.sock",
				"--state-dir", "/tmp/state", "--containerd-endpoint", "unix:///tmp/c.sock", "--libvirt-uri", "qemu:///session"},
			check: func(t *testing.T, cfg config.Config) {
				want := config.Default()
				want.LogLevel, want.Libvirt.Accel, want.Listen, want.StateDir = "debug", "tcg", "/tmp/x.sock", "/tmp/state"
				want.Containerd.Endpoint, want.Libvirt.URI = "unix:///tmp/c.sock", "qemu:///session"
				if cfg.LogLevel != want.LogLevel || !reflect.DeepEqual(cfg.Libvirt, want.Libvirt) || cfg.Listen != want.Listen ||
					cfg.StateDir != want.StateDir || cfg.Containerd != want.Containerd {
					t.Errorf("cfg = %+v, want %+v", cfg, want)
				}
			},
		},
		{name: "missing explicit file", args: []string{"--config", filepath.Join(dir, "nope.toml")}, wantErr: "nope.toml"},
		{name: "flag value validated", args: []string{"--config", file, "--vm-accel", "hvf"}, wantErr: "libvirt.accel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, fs, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig(f, fs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("loadConfig error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "crimux.sock")
	first, err := listen(path)
	if err != nil {
		t.Fatal(err)
	}
	// A crash leaves the socket file behind; the next start must not fail.
	if ul, ok := first.(interface{ SetUnlinkOnClose(bool) }); ok {
		ul.SetUnlinkOnClose(false)
	}
	first.Close()
	second, err := listen(path)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	defer second.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o660 {
		t.Errorf("socket mode = %o, want 660", mode)
	}
}

func TestAsksVersion(t *testing.T) {
	for arg, want := range map[string]bool{"version": true, "--version": true, "-version": true, "--config": false, "versions": false} {
		if asksVersion(arg) != want {
			t.Errorf("asksVersion(%q) = %v, want %v", arg, !want, want)
		}
	}
}

// TestConfigCheck: crimux config check FILE says valid, or names each
// problem and exits 1, without starting anything.
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.toml"), filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte(config.DefaultTOML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("log_level = \"loud\"\n[libvirt]\naccel = \"warp\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args        []string
		code        int
		out, errOut string
	}{
		{[]string{"check", good}, 0, good + ": valid\n", ""},
		{[]string{"check", bad}, 1, "", `log_level: "loud"`},
		{[]string{"check", bad}, 1, "", `libvirt.accel: "warp"`},
		{[]string{"check", filepath.Join(dir, "none.toml")}, 1, "", "no such file"},
		{[]string{"check"}, 2, "", "usage: crimux config default | crimux config check FILE"},
	} {
		var out, errOut bytes.Buffer
		code := configCommand(tc.args, &out, &errOut)
		if code != tc.code || out.String() != tc.out || !strings.Contains(errOut.String(), tc.errOut) {
			t.Errorf("config %q: exit %d, %q, %q; want %d, %q, %q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.errOut)
		}
	}
}

// TestLogFormat: log_format json writes one JSON object per line; text
// key=value lines; anything else is refused by validation.
func TestLogFormat(t *testing.T) {
	var b bytes.Buffer
	slog.New(logHandler("json", &b, nil)).Info("hello", "vm", "c1")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "hello" || line["vm"] != "c1" {
		t.Errorf("json log line %q (%v)", b.String(), err)
	}
	b.Reset()
	slog.New(logHandler("text", &b, nil)).Info("hello", "vm", "c1")
	if !strings.Contains(b.String(), "msg=hello vm=c1") {
		t.Errorf("text log line %q", b.String())
	}
	cfg := config.Default()
	cfg.LogFormat = "xml"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `log_format: "xml"`) {
		t.Errorf("log_format xml: %v, want it refused by name", err)
	}
}
