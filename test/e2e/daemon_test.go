package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// The node-integration tests: crimux as systemd runs it (sd_notify READY
// and WATCHDOG, the unit file and make install), config reload on SIGHUP,
// and the metrics endpoint.

// containerOnly is a config with the bed's containerd as the only runtime
// (no libvirtd needed).
const containerOnly = `
[[runtime]]
name = "containerd"
type = "container"
handlers = ["runc"]
primary = true
`

// daemonRun is a crimux of these tests: its own config file, environment
// and log file (read while it runs, which the harness's buffer cannot be).
type daemonRun struct {
	*crimux
	configPath, logPath string
}

func startDaemon(t *testing.T, configTOML string, env []string, extraArgs ...string) *daemonRun {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", "crimux-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &daemonRun{configPath: filepath.Join(dir, "config.toml"), logPath: filepath.Join(dir, "crimux.log")}
	d.writeConfig(t, configTOML)
	logFile, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			t.Logf("crimux log:\n%s", d.log())
		}
	})
	sock := filepath.Join(bed.runDir, fmt.Sprintf("e2e-d%d.sock", time.Now().UnixNano()%1e9))
	args := append([]string{"--config", d.configPath, "--listen", sock, "--state-dir", filepath.Join(dir, "state"),
		"--containerd-endpoint", bed.containerd, "--log-level", "debug", "--cni-conf-dir", bed.cniConfDir}, extraArgs...)
	d.crimux = &crimux{t: t, socket: sock, endpoint: "unix://" + sock, stateDir: filepath.Join(dir, "state"), logs: &testutil.SyncBuffer{}, args: args}
	d.cmd = exec.Command(bed.crimuxBin, args...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start crimux: %v", err)
	}
	t.Cleanup(d.stop)
	d.waitReady()
	return d
}

func (d *daemonRun) writeConfig(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(d.configPath, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d *daemonRun) log() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

// reload writes the config, sends SIGHUP and waits until crimux logs the
// outcome it is expected to log.
func (d *daemonRun) reload(t *testing.T, content, wantLog string) {
	t.Helper()
	before := strings.Count(d.log(), wantLog)
	d.writeConfig(t, content)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "crimux logs "+wantLog, func() error {
		if strings.Count(d.log(), wantLog) == before {
			return fmt.Errorf("not yet; log tail:\n%s", tail(d.log(), 5))
		}
		return nil
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestNotifyReadyThenWatchdog: under systemd (NOTIFY_SOCKET, WATCHDOG_USEC)
// crimux says READY=1 only once its socket listens, then pings the
// watchdog; SIGHUP is wrapped in RELOADING=1 … READY=1 and SIGTERM says
// STOPPING=1.
func TestNotifyReadyThenWatchdog(t *testing.T) {
	requireBed(t)
	n := testutil.ListenNotify(t, filepath.Join(t.TempDir(), "notify.sock"))
	d := startDaemon(t, containerOnly, []string{"NOTIFY_SOCKET=" + n.Path, "WATCHDOG_USEC=2000000"})
	n.Next(t, "READY=1", 10*time.Second)
	if _, err := os.Stat(d.socket); err != nil {
		t.Fatalf("READY=1 before the socket exists: %v", err)
	}
	n.Next(t, "WATCHDOG=1", 3*time.Second)
	n.Next(t, "WATCHDOG=1", 3*time.Second) // and again: a loop, not a one-off

	d.reload(t, containerOnly, "config reloaded")
	n.Next(t, "RELOADING=1", 3*time.Second)
	n.Next(t, "READY=1", 3*time.Second)

	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	n.Next(t, "STOPPING=1", 10*time.Second)
}

// TestWatchdogSilentWhilePrimaryDown: the watchdog is fed only while the
// primary runtime answers; crimux still serves and says READY.
func TestWatchdogSilentWhilePrimaryDown(t *testing.T) {
	requireBed(t)
	n := testutil.ListenNotify(t, filepath.Join(t.TempDir(), "notify.sock"))
	startDaemon(t, containerOnly, []string{"NOTIFY_SOCKET=" + n.Path, "WATCHDOG_USEC=1000000"},
		"--containerd-endpoint", "unix:///run/crimux-testbed/no-such-containerd.sock")
	n.Next(t, "READY=1", 10*time.Second)
	time.Sleep(3 * time.Second)
	for _, m := range n.All() {
		if strings.Contains(m, "WATCHDOG=1") {
			t.Fatalf("watchdog pinged although the primary cannot be reached: %q", n.All())
		}
	}
}

// TestSystemdUnitAndInstall: make install puts everything where the unit
// expects it, keeps an existing config, and systemd-analyze verify passes
// on the installed unit.
func TestSystemdUnitAndInstall(t *testing.T) {
	if os.Getenv("CRIMUX_E2E") != "1" {
		t.Skip("CRIMUX_E2E is not 1")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is missing (make host-tools installs Debian's systemd package)")
	}
	root := t.TempDir()
	prefix, etc := filepath.Join(root, "usr"), filepath.Join(root, "etc")
	install := func() string {
		out, err := exec.Command("make", "-C", repoRoot(), "install", "PREFIX="+prefix, "SYSCONFDIR="+etc).CombinedOutput()
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		return string(out)
	}
	install()
	unit := filepath.Join(prefix, "lib/systemd/system/crimux.service")
	for _, f := range []string{"bin/crimux", "bin/crimuxctl", "lib/crimux/crimux-qemu-wrapper", "lib/systemd/system/crimux.service",
		"share/crimux/runtimeclass-vm.yaml", "share/crimux/crimux-node-agent-rbac.yaml", "share/crimux/crimux-node-agent-policy.yaml"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("make install did not install %s: %v", f, err)
		}
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "Restart=always", "KillMode=process",
		"After=containerd.service libvirtd.service", "Before=kubelet.service",
		"ExecReload=" + prefix + "/bin/crimux reload --pid $MAINPID",
		"ExecStart=" + prefix + "/bin/crimux --config " + etc + "/crimux/config.toml"} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("installed unit lacks %q:\n%s", want, text)
		}
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	t.Logf("systemd-analyze verify %s: passed", unit)

	cfg := filepath.Join(etc, "crimux/config.toml")
	b, err = os.ReadFile(cfg)
	if err != nil {
		t.Fatalf("default config not installed: %v", err)
	}
	if want := `emulator = "` + prefix + `/lib/crimux/crimux-qemu-wrapper"`; !strings.Contains(string(b), want) {
		t.Errorf("installed config lacks %s", want)
	}
	if err := os.WriteFile(cfg, []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	install()
	if b, _ := os.ReadFile(cfg); string(b) != "# mine\n" {
		t.Errorf("make install overwrote an existing config: %q", b)
	}
}

// TestReloadAddsRuntime: SIGHUP with a config that adds a second container
// runtime (handler runc2 on the same containerd) makes it usable at once,
// without a restart; an invalid config, or one whose runtimes cannot be
// built, is refused with the reason logged and the old one stays.
func TestReloadAddsRuntime(t *testing.T) {
	requireBed(t)
	requireContainerdHandler(t, "runc2")
	d := startDaemon(t, containerOnly, nil)
	pid := d.cmd.Process.Pid
	d.crictl("pull", busyboxImage)
	pod := podJSON(t, "reload-runc2", "")
	if out, err := d.crictlErr("runp", "--runtime", "runc2", pod); err == nil || !strings.Contains(out, "no runtime serves it") {
		t.Fatalf("runp --runtime runc2 before the reload: %v\n%s", err, out)
	}

	withRunc2 := containerOnly + `
[[runtime]]
name = "runc2"
type = "container"
handlers = ["runc2"]
`
	d.reload(t, withRunc2, "config reloaded")
	runRunc2 := func() {
		t.Helper()
		podID := d.crictl("runp", "--runtime", "runc2", pod)
		defer d.crictlErr("rmp", "-f", podID)
		var insp struct {
			Status struct {
				State          string `json:"state"`
				RuntimeHandler string `json:"runtimeHandler"`
			} `json:"status"`
		}
		mustJSON(t, d.crictl("inspectp", "-o", "json", podID), &insp)
		if insp.Status.State != "SANDBOX_READY" || insp.Status.RuntimeHandler != "runc2" {
			t.Fatalf("pod of runc2: %+v, want ready with handler runc2", insp.Status)
		}
		ctrID := d.crictl("create", podID, containerJSON(t, "hello", busyboxImage, []string{"echo", "hello from runc2"}), pod)
		d.crictl("start", ctrID)
		testutil.Eventually(t, 10*time.Second, "the container's output", func() error {
			if out, _ := d.crictlErr("logs", ctrID); !strings.Contains(out, "hello from runc2") {
				return fmt.Errorf("logs: %q", out)
			}
			return nil
		})
		d.crictl("rmp", "-f", podID)
	}
	runRunc2()

	for _, bad := range []struct{ name, config, why string }{
		{"invalid", withRunc2 + "primary = true\n", "exactly one runtime must be primary"},
		{"unbuildable", withRunc2 + "\n[[runtime]]\nname = \"broken\"\ntype = \"container\"\nendpoint = \"unix://\"\n", "must be unix:///path"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			d.reload(t, bad.config, "config reload failed")
			if line := lastLine(d.log(), "config reload failed"); !strings.Contains(line, bad.why) {
				t.Fatalf("the refused reload's log line does not say why (%q): %s", bad.why, line)
			}
		})
	}
	if !d.alive() || d.cmd.Process.Pid != pid {
		t.Fatal("crimux is not the same process after the reloads")
	}
	runRunc2() // the old config is still in force
}

func lastLine(log, containing string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], containing) {
			return lines[i]
		}
	}
	return ""
}

// requireContainerdHandler fails unless the bed's containerd serves the
// runtime handler (test/bed/up.sh configures runc2).
func requireContainerdHandler(t *testing.T, handler string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", bed.containerd, "info").CombinedOutput()
	if err != nil {
		t.Fatalf("crictl info on the bed's containerd: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%q", handler)) {
		t.Fatalf("the bed's containerd has no runtime handler %q: it runs with an older config; "+
			"restart it (kill $(cat %s/containerd.pid); test/bed/up.sh)", handler, bed.runDir)
	}
}

// TestMetricsEndpoint: after some calls, one that fails and a containerd
// reconnect, the metrics address serves every family, with non-zero
// samples where the calls made some.
func TestMetricsEndpoint(t *testing.T) {
	requireBed(t)
	private := newPrivateContainerd(t)
	private.start()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := containerOnly + fmt.Sprintf(`
[[runtime]]
name = "spare"
type = "container"
handlers = ["spare"]
endpoint = "unix://%s"
`, private.socket)
	// WATCHDOG_USEC without NOTIFY_SOCKET: health checks every second.
	d := startDaemon(t, cfg, []string{"WATCHDOG_USEC=2000000"}, "--metrics-address", addr)
	d.crictl("pull", busyboxImage)
	d.crictl("pods")
	d.crictl("info")
	if _, err := d.crictlErr("inspect", "0123456789abcdef"); err == nil {
		t.Fatal("inspect of an unknown container succeeded")
	}
	get := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
		}
		return string(b)
	}
	testutil.Eventually(t, 10*time.Second, "spare runtime ready", func() error {
		return hasSample(get(), `crimux_runtime_ready{runtime="spare",type="container"}`, true)
	})
	private.stop()
	testutil.Eventually(t, 10*time.Second, "spare runtime not ready", func() error {
		return hasSample(get(), `crimux_runtime_ready{runtime="spare",type="container"} 0`, false)
	})
	private.start()
	testutil.Eventually(t, 15*time.Second, "a reconnect counted", func() error {
		return hasSample(get(), fmt.Sprintf(`crimux_reconnects_total{target="unix://%s"}`, private.socket), true)
	})

	text := get()
	for _, want := range []struct {
		series  string
		nonZero bool
	}{
		{`crimux_rpc_duration_seconds_count{api="cri",rpc="PullImage",runtime="containerd"}`, true},
		{`crimux_rpc_duration_seconds_count{api="cri",rpc="ListPodSandbox",runtime="all"}`, true},
		{`crimux_rpc_duration_seconds_bucket{api="cri",rpc="Status",runtime="all",le="+Inf"}`, true},
		{`crimux_rpc_errors_total{api="cri",code="NotFound",rpc="ContainerStatus",runtime="containerd"}`, true},
		{`crimux_runtime_ready{runtime="containerd",type="container"} 1`, false},
		{`crimux_reconnects_total{target="unix://` + private.socket + `"}`, true},
		{`crimux_vms{power_state="running"}`, false},
		{`crimux_gc_removals_total{kind="domain"}`, false},
		{`crimux_config_reloads_total{result="success"}`, false},
		{`crimux_build_info{version=`, false},
		{`process_resident_memory_bytes`, true},
	} {
		if err := hasSample(text, want.series, want.nonZero); err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
		return
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "crimux_") && !strings.Contains(line, "_bucket{") && !strings.HasSuffix(line, " 0") {
			t.Log(line)
		}
	}
}

var sampleLine = regexp.MustCompile(`^(\S+(?:\{[^}]*\})?) (\S+)$`)

// hasSample finds a sample whose series starts with prefix; nonZero also
// wants its value non-zero.
func hasSample(text, prefix string, nonZero bool) error {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !nonZero || (m[2] != "0" && m[2] != "0.0") {
			return nil
		}
		return fmt.Errorf("%s is zero", line)
	}
	return fmt.Errorf("no sample %s", prefix)
}
