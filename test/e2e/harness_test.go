// Package e2e tests crimux end to end against the real test bed: a private
// containerd (runc, CNI) started by test/bed/up.sh, images served from a
// loopback registry, and crictl built from cri-tools. Nothing here is
// faked: a test that passes proves crimux works in front of containerd.
//
// The tests run when CRIMUX_E2E=1 (make e2e sets it); otherwise they skip.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/testutil"
)

// bed describes the test bed, from the environment with test/bed defaults.
// BED_INSTANCE=b (test/bed/lib.sh) is the bed's second containerd and pod
// network, which test/all.sh's second host lane runs on.
var bed = struct {
	testbed, containerd, crimuxBin, runDir string
	// cniConfDir is the bed's CNI config (containerd's), which VM pods
	// join too; ipamDir is where its host-local IPAM keeps addresses;
	// cniBinDir holds the bed's plugins (test/bed/install.sh).
	cniConfDir, ipamDir, bridge, cniBinDir string
	// podNet is the IPv4 pod addresses' prefix ("10.88.77."), gateway
	// the bridge's address on this host.
	podNet, gateway string
}{
	cniConfDir: env("CRIMUX_CNI_CONF_DIR", "/etc/crimux-testbed/"+bedInstance("cni")+"/net.d"),
	cniBinDir:  env("CRIMUX_CNI_BIN_DIR", "/opt/cni/bin"),
	ipamDir:    "/var/lib/crimux-testbed/" + bedInstance("cni") + "/networks/" + bedInstance("crimux-testbed"),
	bridge:     map[string]string{"": "crimuxbr0", "b": "crimuxbr1"}[os.Getenv("BED_INSTANCE")],
	podNet:     map[string]string{"": "10.88.77.", "b": "10.88.76."}[os.Getenv("BED_INSTANCE")],
	gateway:    map[string]string{"": "10.88.77.1", "b": "10.88.76.1"}[os.Getenv("BED_INSTANCE")],
	testbed:    env("CRIMUX_TESTBED", "/opt/crimux-testbed"),
	containerd: env("CRIMUX_CONTAINERD_ENDPOINT", "unix:///run/crimux-testbed/"+bedInstance("containerd")+"/containerd.sock"),
	crimuxBin:  os.Getenv("CRIMUX_BIN"),
	runDir:     env("CRIMUX_RUN_DIR", "/run/crimux-testbed"),
}

// bedConflist is the bed's network config file (test/bed/up.sh) in
// bed.cniConfDir.
var bedConflist = "10-" + bedInstance("crimux-testbed") + ".conflist"

// bedInstance is name as BED_INSTANCE's bed calls it: name-b for b.
func bedInstance(name string) string {
	return name + instanceSuffix(os.Getenv("BED_INSTANCE"))
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	if os.Getenv("CRIMUX_E2E") != "1" {
		fmt.Println("e2e: CRIMUX_E2E is not 1; skipping (run make e2e)")
		os.Exit(m.Run())
	}
	if bed.crimuxBin == "" {
		dir, err := os.MkdirTemp("", "crimux-e2e-bin")
		if err != nil {
			panic(err)
		}
		bed.crimuxBin = filepath.Join(dir, "crimux")
		out, err := exec.Command("go", "build", "-o", bed.crimuxBin, "github.com/crimux/crimux/cmd/crimux").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build crimux: %v\n%s", err, out)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	os.Exit(m.Run())
}

// parallel marks a test that owns all it makes (its crimux, state dir,
// pods, cgroup parent and pod UIDs) as one to run beside the others of
// its run (go test -parallel). A test that kills, restarts or reconfigures
// the bed's daemons, or compares what the whole host holds before and
// after, does not call it: go test runs those first, one at a time,
// before any parallel test starts. CRIMUX_E2E_SERIAL=1 runs every test
// alone (to tell a failure of a test from one of its neighbours').
func parallel(t *testing.T) {
	t.Helper()
	if os.Getenv("CRIMUX_E2E_SERIAL") != "1" {
		parallelTests.Store(t.Name(), true)
		t.Parallel()
	}
}

// parallelTests are the top-level tests that called parallel.
var parallelTests sync.Map

// sharedFactor stretches the deadlines of a test that runs beside others:
// three TCG guests at once on two cores, beside CI's other lanes, boot in
// up to three times what one takes alone.
const sharedFactor = 3

// within is a deadline d on a guest (its boot, its answer), stretched by
// sharedFactor for a test running beside others, and by slowFactor.
func within(t *testing.T, d time.Duration) time.Duration {
	top, _, _ := strings.Cut(t.Name(), "/")
	if _, ok := parallelTests.Load(top); ok {
		d *= sharedFactor
	}
	return slowed(d)
}

// podUID is a pod UID unique to this run's pod of that name: containerd
// refuses a second sandbox of the same name, namespace, UID and attempt,
// and tests running side by side may name their pods alike.
func podUID(name string) string {
	return fmt.Sprintf("%s-uid-%d-%d", name, os.Getpid(), podSeq.Add(1))
}

var podSeq atomic.Int64

// requireBed skips unless e2e runs are on, and fails if the bed is missing.
func requireBed(t *testing.T) {
	t.Helper()
	if os.Getenv("CRIMUX_E2E") != "1" {
		t.Skip("CRIMUX_E2E is not 1")
	}
	sock := strings.TrimPrefix(bed.containerd, "unix://")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("test bed containerd socket %s missing (run test/bed/up.sh): %v", sock, err)
	}
}

// crimux is one running crimux daemon of a test.
type crimux struct {
	t        *testing.T
	cmd      *exec.Cmd
	socket   string
	endpoint string
	stateDir string
	args     []string
	logs     *testutil.SyncBuffer
	// bin is the crimux binary run; "" is the one under test.
	bin string
	// libvirtd is libvirtd's pid when crimux last started ("": none ran).
	libvirtd string
	// prefix runs crimux, and crictl against it, in another node's
	// namespaces (test/bed/node2-exec.sh); nil: the host's.
	prefix []string
	// wrapper and placement are the qemu wrapper and placement socket of
	// its state dir (ownPlacement); "" when the test's config names them.
	wrapper, placement string
}

// startCrimux runs the crimux binary in front of containerdEndpoint with a
// state dir and socket of the test's own, and stops it at cleanup.
func startCrimux(t *testing.T, containerdEndpoint string, extraArgs ...string) *crimux {
	t.Helper()
	return startCrimuxBin(t, "", containerdEndpoint, extraArgs...)
}

// startCrimuxBin is startCrimux of another crimux binary (bin; "" is the
// one under test). Another binary is given --listen as a path, as every
// crimux has taken it.
func startCrimuxBin(t *testing.T, bin, containerdEndpoint string, extraArgs ...string) *crimux {
	t.Helper()
	return startCrimuxOn(t, nil, bin, containerdEndpoint, extraArgs...)
}

// startCrimuxOn is startCrimuxBin run through prefix: in another node's
// namespaces (test/bed/node2-exec.sh), crictl against it too.
func startCrimuxOn(t *testing.T, prefix []string, bin, containerdEndpoint string, extraArgs ...string) *crimux {
	t.Helper()
	// Not t.TempDir(): qemu runs as libvirt's qemu user and must traverse
	// the state dir to reach a VM's disk and console.
	dir, err := os.MkdirTemp("/var/lib", "crimux-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(bed.runDir, fmt.Sprintf("e2e-%d.sock", time.Now().UnixNano()%1e9))
	args := append([]string{
		// unix:// as kubelet and crictl write it: every e2e test serves
		// on an address given so.
		"--config", filepath.Join(dir, "absent.toml"), "--listen", "unix://" + sock,
		"--state-dir", filepath.Join(dir, "state"), "--containerd-endpoint", containerdEndpoint, "--log-level", "debug",
		"--cni-conf-dir", bed.cniConfDir,
	}, extraArgs...)
	// An explicit --config that does not exist is an error, so write one.
	if err := os.WriteFile(filepath.Join(dir, "absent.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &crimux{t: t, socket: sock, endpoint: "unix://" + sock, stateDir: filepath.Join(dir, "state"), logs: &testutil.SyncBuffer{}, args: args, bin: bin, prefix: prefix}
	for i, a := range extraArgs { // a state dir of the test's own (the last --state-dir wins)
		if a == "--state-dir" && i+1 < len(extraArgs) {
			c.stateDir = extraArgs[i+1]
		}
	}
	if prefix == nil {
		c.ownPlacement(dir)
	}
	if bin != "" {
		c.args = downgradedArgs(c.args)
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

// start runs the crimux binary and waits until it listens.
func (c *crimux) start() {
	c.t.Helper()
	_ = os.Remove(c.socket)
	c.libvirtd = libvirtdRunning()
	bin := c.bin
	if bin == "" {
		bin = bed.crimuxBin
	}
	c.cmd = exec.Command(bin, c.args...)
	if len(c.prefix) > 0 {
		c.cmd = exec.Command(c.prefix[0], append(append(c.prefix[1:len(c.prefix):len(c.prefix)], bin), c.args...)...)
	}
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	if err := c.cmd.Start(); err != nil {
		c.t.Fatalf("start crimux: %v", err)
	}
	c.waitReady()
}

// kill SIGKILLs crimux, as a crash or the OOM killer would.
func (c *crimux) kill() {
	c.t.Helper()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// restart kills crimux and starts it again on the same state dir and socket.
func (c *crimux) restart() {
	c.t.Helper()
	c.kill()
	fmt.Fprintf(c.logs, "---- restart ----\n")
	c.start()
}

func (c *crimux) waitReady() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(c.socket); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("crimux did not listen on %s within 10s; logs:\n%s", c.socket, c.logs)
}

func (c *crimux) stop() {
	if c.cmd == nil || c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	c.checkLibvirtd()
	if c.t.Failed() {
		c.t.Logf("crimux logs:\n%s", c.logs)
	}
	_ = os.Remove(c.socket)
}

// checkLibvirtd fails the test when libvirtd ran as crimux started and is
// gone now that it stopped: libvirtd has no supervisor here, so a crash
// (Debian 12's libvirtd crashed on a client's close racing its event
// deregistrations, runtimes/libvirt/conn.go) would otherwise surface only
// as the next test's "libvirtd does not answer". A libvirtd the test
// restarted has another pid and passes.
func (c *crimux) checkLibvirtd() {
	if c.libvirtd == "" || libvirtdRunning() != "" {
		return
	}
	time.Sleep(time.Second) // a restart in progress
	if libvirtdRunning() != "" {
		return
	}
	crashes, _ := exec.Command("sh", "-c", "dmesg | grep -E 'libvirtd.*(segfault|trap)' | tail -3").Output()
	c.t.Errorf("libvirtd (pid %s when crimux started) is gone after crimux stopped; kernel log:\n%s", c.libvirtd, crashes)
}

// libvirtdRunning returns the pids of running libvirtd processes, "" for none.
func libvirtdRunning() string {
	out, _ := exec.Command("pidof", "libvirtd").Output()
	return strings.TrimSpace(string(out))
}

// alive reports whether the crimux process is still running.
func (c *crimux) alive() bool {
	return c.cmd.ProcessState == nil && c.cmd.Process.Signal(syscallZero) == nil
}

// client returns CRI clients connected to crimux.
func (c *crimux) client() (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	c.t.Helper()
	conn := c.dial()
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

// dial is a connection to crimux's socket, closed at the test's end.
func (c *crimux) dial() *grpc.ClientConn {
	c.t.Helper()
	conn, err := grpc.NewClient(c.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// crictl runs crictl against crimux and returns its trimmed stdout; it fails
// the test on a non-zero exit.
func (c *crimux) crictl(args ...string) string {
	c.t.Helper()
	out, err := c.crictlErr(args...)
	if err != nil {
		c.t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// crictlErr runs crictl and returns its output and error.
func (c *crimux) crictlErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return c.crictlCmd(ctx, nil, append([]string{"--timeout", "60s"}, args...)...)
}

// crictlCmd runs crictl with stdin (may be nil) and returns its stdout,
// or stdout and stderr with the error.
func (c *crimux) crictlCmd(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	full := append([]string{"--runtime-endpoint", c.endpoint, "--image-endpoint", c.endpoint}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(bed.testbed, "bin", "crictl"), full...)
	if len(c.prefix) > 0 { // its streaming server listens in its node's network namespace
		cmd = exec.CommandContext(ctx, c.prefix[0], append(append(c.prefix[1:len(c.prefix):len(c.prefix)], cmd.Path), full...)...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String() + "\n" + stderr.String()), err
	}
	return strings.TrimSpace(stdout.String()), nil
}

// writeJSON writes a crictl config file into the test's temp dir.
func writeJSON(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// slowFactor stretches the deadlines of waits on a guest or node that
// runs slower than a host's VM: the test node (test/node) is a TCG VM
// whose own VMs are TCG inside TCG, about 15 times slower than on the
// host, and slower again while the host's suites share the 2 cores
// (test/all.sh runs it beside them and sets CRIMUX_E2E_SLOW). 1 unless
// CRIMUX_E2E_SLOW is a number above 1.
var slowFactor = func() float64 {
	f, err := strconv.ParseFloat(os.Getenv("CRIMUX_E2E_SLOW"), 64)
	if err != nil || f < 1 {
		return 1
	}
	return f
}()

// slowed is d stretched by slowFactor.
func slowed(d time.Duration) time.Duration {
	return time.Duration(float64(d) * slowFactor)
}
