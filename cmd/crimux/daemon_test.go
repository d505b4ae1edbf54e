package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/crifake"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
)

// testDaemon is crimux's daemon in-process, in front of a fake containerd,
// with both workload types served by the containerd factory (no libvirtd).
type testDaemon struct {
	d       *daemon
	fake    *crifake.Fake
	cfgPath string
	socket  string
	logs    *testutil.SyncBuffer
	hup     chan os.Signal
	rs      runtimeapi.RuntimeServiceClient
	done    chan error
}

const oneRuntime = `
[[runtime]]
name = "containerd"
type = "container"
handlers = ["runc"]
primary = true
`

func startTestDaemon(t *testing.T, configTOML string) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	td := &testDaemon{fake: crifake.New("ctrd"), cfgPath: filepath.Join(dir, "config.toml"),
		socket: crifake.SocketPath(t, "crimux.sock"), logs: &testutil.SyncBuffer{}, hup: make(chan os.Signal, 1), done: make(chan error, 1)}
	srv := crifake.Serve(t, td.fake, crifake.SocketPath(t, "containerd.sock"))
	td.writeConfig(t, configTOML)
	f, fs, err := parseFlags([]string{"--config", td.cfgPath, "--listen", td.socket, "--state-dir", filepath.Join(dir, "state"),
		"--containerd-endpoint", srv.Endpoint(), "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f, fs)
	if err != nil {
		t.Fatal(err)
	}
	td.d = newDaemon(cfg, f, fs, td.logs)
	td.d.reloads = reloadStatus{dir: dir}
	td.d.newFactories = func(cfg config.Config, _ *slog.Logger) map[string]registry.Factory {
		fac := containerd.Factory{Defaults: cfg.Containerd}
		return map[string]registry.Factory{config.TypeContainer: fac, config.TypeVM: fac}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { td.done <- td.d.serve(ctx, td.hup) }()
	t.Cleanup(func() {
		cancel()
		if err := <-td.done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon logs:\n%s", td.logs)
		}
	})
	conn, err := grpc.NewClient("unix://"+td.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	td.rs = runtimeapi.NewRuntimeServiceClient(conn)
	testutil.Eventually(t, 5*time.Second, "crimux listening", func() error {
		_, err := td.rs.Version(context.Background(), &runtimeapi.VersionRequest{})
		return err
	})
	return td
}

func (td *testDaemon) writeConfig(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(td.cfgPath, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload writes content as the config, sends SIGHUP and waits for the log
// line the reload ends with.
func (td *testDaemon) reload(t *testing.T, content, wantLog string) {
	t.Helper()
	before := strings.Count(td.logs.String(), wantLog)
	td.writeConfig(t, content)
	td.hup <- os.Interrupt // any signal value: serve only receives
	testutil.Eventually(t, 5*time.Second, "log "+wantLog, func() error {
		if strings.Count(td.logs.String(), wantLog) == before {
			return errors.New("not logged yet")
		}
		return nil
	})
}

func (td *testDaemon) runPod(handler string) error {
	_, err := td.rs.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{
		Config:         &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
		RuntimeHandler: handler,
	})
	return err
}

func TestReloadAddsRuntimeAndKeepsOldOnBadConfig(t *testing.T) {
	td := startTestDaemon(t, oneRuntime)
	if err := td.runPod("runc2"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RunPodSandbox(runc2) before the reload: %v, want InvalidArgument", err)
	}

	twoRuntimes := oneRuntime + `
[[runtime]]
name = "runc2"
type = "container"
handlers = ["runc2"]
`
	td.reload(t, twoRuntimes, "config reloaded")
	if err := td.runPod("runc2"); err != nil {
		t.Fatalf("RunPodSandbox(runc2) after the reload: %v", err)
	}
	if c, _ := td.fake.LastCall("RunPodSandbox"); c.Request.(*runtimeapi.RunPodSandboxRequest).GetRuntimeHandler() != "runc2" {
		t.Fatalf("containerd got handler %q, want runc2", c.Request.(*runtimeapi.RunPodSandboxRequest).GetRuntimeHandler())
	}

	tests := []struct {
		name, config, wantLog string
	}{
		{"two primaries", twoRuntimes + "primary = true\n", "exactly one runtime must be primary"},
		{"unknown key", twoRuntimes + "colour = \"blue\"\n", "unknown keys"},
		{"runtime that cannot be built", twoRuntimes + "\n[[runtime]]\nname = \"broken\"\ntype = \"container\"\nendpoint = \"unix://\"\n", "must be unix:///path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td.reload(t, tt.config, "config reload failed")
			if logs := td.logs.String(); !strings.Contains(logs, tt.wantLog) {
				t.Errorf("the failed reload's log does not say %q:\n%s", tt.wantLog, logs)
			}
			if err := td.runPod("runc2"); err != nil {
				t.Errorf("RunPodSandbox(runc2) after a rejected reload: %v (the old config must stay)", err)
			}
		})
	}
	if got := gathered(t, td, "crimux_config_reloads_total", "failure"); got != 3 {
		t.Errorf("failed reloads counted %v, want 3", got)
	}

	// The metrics address cannot change while crimux runs: the reload
	// that changes it fails, naming it, and applies nothing (runc2 stays);
	// the status crimux reload reads says so.
	td.reload(t, "metrics_address = \"127.0.0.1:1\"\n"+oneRuntime, "metrics_address cannot change while crimux runs")
	if err := td.runPod("runc2"); err != nil {
		t.Fatalf("RunPodSandbox(runc2) after a reload refused for metrics_address: %v (nothing may be applied)", err)
	}
	if b, err := os.ReadFile(reloadStatusPath(td.d.reloads.dir, os.Getpid())); err != nil || !strings.Contains(string(b), " failed: metrics_address cannot change") {
		t.Fatalf("reload status: %q, %v; want failed naming metrics_address", b, err)
	}
	td.reload(t, oneRuntime, "config reloaded")
	if err := td.runPod("runc2"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RunPodSandbox(runc2) after the reload that removed it: %v, want InvalidArgument", err)
	}
	if _, err := td.rs.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("crimux stopped answering on its socket: %v", err)
	}
}

func TestReadyAndWatchdog(t *testing.T) {
	notify := testutil.ListenNotify(t, crifake.SocketPath(t, "notify.sock"))
	t.Setenv("NOTIFY_SOCKET", notify.Path)
	t.Setenv("WATCHDOG_USEC", "200000")
	td := startTestDaemon(t, oneRuntime)
	notify.Next(t, "READY=1", 2*time.Second)
	notify.Next(t, "WATCHDOG=1", 2*time.Second)

	// The primary stops answering: no more pings, readiness 0.
	td.fake.SetError("Status", status.Error(codes.Unavailable, "down"))
	time.Sleep(300 * time.Millisecond) // a check in flight may still ping
	notify.Drain()
	time.Sleep(500 * time.Millisecond)
	if got := notify.Drain(); strings.Contains(got, "WATCHDOG=1") {
		t.Fatalf("watchdog pinged while the primary does not answer: %q", got)
	}
	if got := gathered(t, td, "crimux_runtime_ready", "containerd", config.TypeContainer); got != 0 {
		t.Errorf("crimux_runtime_ready{runtime=containerd} = %v, want 0", got)
	}
	td.fake.SetError("Status", nil)
	notify.Next(t, "WATCHDOG=1", 2*time.Second)
	if got := gathered(t, td, "crimux_runtime_ready", "containerd", config.TypeContainer); got != 1 {
		t.Errorf("crimux_runtime_ready{runtime=containerd} = %v, want 1", got)
	}
}

// gathered reads the value of the counter or gauge name whose label values
// are labels (in the order the family declares them); -1 if absent.
func gathered(t *testing.T, td *testDaemon, name string, labels ...string) float64 {
	t.Helper()
	families, err := td.d.metrics.Registry().Gather()
	if err != nil {
		t.Logf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var values []string
			for _, l := range m.GetLabel() {
				values = append(values, l.GetValue())
			}
			if fmt.Sprint(values) != fmt.Sprint(labels) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func TestCallTrackerWaitsForOldCalls(t *testing.T) {
	tr := newCallTracker()
	release := make(chan struct{})
	started := make(chan struct{})
	go tr.unary(context.Background(), nil, nil, func(context.Context, any) (any, error) {
		close(started)
		<-release
		return nil, nil
	})
	<-started
	old := tr.rotate()
	// A call of the new generation does not hold the old one.
	go tr.unary(context.Background(), nil, nil, func(context.Context, any) (any, error) { select {} })
	if waitTimeout(old, 50*time.Millisecond) {
		t.Fatal("old generation drained while its call runs")
	}
	close(release)
	if !waitTimeout(old, time.Second) {
		t.Fatal("old generation not drained after its call returned")
	}
}

func TestRestartOnlyChanges(t *testing.T) {
	cur := config.Default()
	next := config.Default()
	next.Listen, next.StateDir, next.MetricsAddress = "/run/x.sock", "/var/lib/x", "127.0.0.1:1"
	next.Libvirt.Accel = "kvm"
	next.Libvirt.Migration.Address = "10.0.0.1:7345"
	next.LogLevel = "debug"
	next.Libvirt.AgentCallsPerVM, next.Libvirt.AgentCallsPerNode = 1, 2
	next.Libvirt.GuestBootTimeout = config.Duration{Duration: time.Second}
	want := []string{"listen", "state_dir", "metrics_address", "libvirt.accel", "libvirt.migration.address"}
	if got := restartOnlyChanges(cur, next); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("restartOnlyChanges = %q, want %q (log_level and the live libvirt keys change live)", got, want)
	}
	if got := restartOnlyChanges(cur, cur); len(got) != 0 {
		t.Errorf("restartOnlyChanges of the same config = %q", got)
	}
}
