package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/converter/vm"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/test/bench/cgroups"
	"github.com/crimux/crimux/test/bench/criclient"
)

// Node two of the test bed for the migrate phase (test/bed/node2-up.sh:
// a second libvirtd in mount and network namespaces of its own, at
// 10.231.0.2, TLS between the two): brought up at the phase's start with
// a crimux of its own in it (test/bed/node2-exec.sh), and the bench's
// crimux (node one) restarted with a [libvirt.migration] section, which
// it cannot have otherwise: its endpoint listens on node one's address on
// the link to node two, there only while node two is up. It runs its VMs
// through the bed's qemu wrapper meanwhile (upNode2 says why). The
// phase's end undoes all of it (test/bed/node2-down.sh).

const (
	node2UpScript   = "test/bed/node2-up.sh"
	node2DownScript = "test/bed/node2-down.sh"
	node2ExecScript = "test/bed/node2-exec.sh"
	node2CNIConfDir = "/etc/crimux-testbed/node2/cni/net.d"
	node1Addr       = "10.231.0.1"
	node2Addr       = "10.231.0.2"
	bedPKIDir       = "/etc/crimux-testbed/pki"
	// node2ScriptTimeout bounds node2-up.sh and node2-down.sh (a first
	// start probes qemu's capabilities afresh: up to a minute).
	node2ScriptTimeout = 5 * time.Minute
)

// migrationSection is the [libvirt.migration] section of node n (1, 2),
// as the e2e tests write it (test/e2e/migrate_helpers_test.go).
func migrationSection(n int) string {
	addr := node1Addr
	if n == 2 {
		addr = node2Addr
	}
	return fmt.Sprintf("\n[libvirt.migration]\naddress = %q\nlibvirt_uri = %q\npki_dir = %q\n",
		addr+":7345", "qemu+tls://"+addr+"/system", filepath.Join(bedPKIDir, fmt.Sprintf("node%d", n)))
}

// node2 is node two's crimux: its process, dirs and endpoint, and the
// VM pods the phase made there; node1Restarted: the bench's crimux was
// restarted for the phase.
type node2 struct {
	cmd                  *exec.Cmd
	exited               chan struct{}
	dir, socket, logPath string
	cri                  *criclient.Endpoint
	vm                   vmv1.VMServiceClient
	pods                 []*vmPod
	node1Restarted       bool
}

// bedScript runs one of the bed's scripts (as root, as the bench runs).
func (b *bench) bedScript(ctx context.Context, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, node2ScriptTimeout)
	defer cancel()
	path, err := filepath.Abs(script)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", script, strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	return string(out), nil
}

// node2Virsh runs virsh against node two's libvirtd.
func (b *bench) node2Virsh(ctx context.Context, args ...string) (string, error) {
	out, err := b.bedScript(ctx, node2ExecScript, append([]string{"virsh", "-c", "qemu:///system"}, args...)...)
	return strings.TrimSpace(out), err
}

// upNode2 brings node two up with a crimux of its own and restarts the
// bench's crimux with its migration section. What it did is returned
// even on error, for downNode2.
func (b *bench) upNode2(ctx context.Context) (*node2, error) {
	t0 := time.Now()
	n := &node2{dir: filepath.Join(b.dir, "node2"), socket: filepath.Join("/run/crimux-testbed", "bench-"+b.runID+"-node2.sock")}
	n.logPath = filepath.Join(n.dir, "crimux.log")
	out, err := b.bedScript(ctx, node2UpScript)
	if err != nil {
		return n, err
	}
	b.logf("migrate: %s", lastLines(out, 1))
	// The bed's qemu wrapper, not the bench's: a migrating domain keeps
	// its <emulator> on the target (converter/vm MigrationXML), and only
	// the bed's wrapper's placement socket, /run/crimux/placement.sock,
	// is each node's own crimux's (node two binds its own /run/crimux;
	// /run/crimux-bench is the host's in both).
	if err := ensureTraversable(filepath.Dir(config.Default().Libvirt.PlacementSocket)); err != nil {
		return n, err
	}
	n.node1Restarted = true
	section := migrationSection(1)
	if b.opts.migrateBandwidthMiB >= 0 {
		section += fmt.Sprintf("bandwidth_mib = %d\n", b.opts.migrateBandwidthMiB)
	}
	if err := b.restartCrimux(ctx, true, section); err != nil {
		return n, fmt.Errorf("node one's crimux with its migration section: %w", err)
	}
	if err := b.startNode2Crimux(ctx, n); err != nil {
		return n, fmt.Errorf("node two's crimux: %w", err)
	}
	b.logf("migrate: node two up, both crimux migrating, in %s", time.Since(t0).Round(100*time.Millisecond))
	return n, nil
}

// restartCrimux restarts the bench's crimux with its config as
// daemon.Reconfigure makes it and waits until its VM runtime is ready.
func (b *bench) restartCrimux(ctx context.Context, bedWrapper bool, extra string) error {
	if err := b.crimux.Reconfigure(bedWrapper, extra); err != nil {
		return err
	}
	b.crimux.Stop()
	if err := b.crimux.Start(); err != nil {
		return err
	}
	if err := b.crimux.WaitSocket(30 * time.Second); err != nil {
		return err
	}
	if err := b.redial(); err != nil {
		return err
	}
	return b.waitVMRuntime(ctx)
}

// startNode2Crimux starts a crimux in node two: its VMs' identities in
// another range than node one's (as on another machine), node two's CNI
// config, its socket where the host reaches it, the run's containerd.
func (b *bench) startNode2Crimux(ctx context.Context, n *node2) error {
	if err := os.MkdirAll(n.dir, 0o711); err != nil {
		return err
	}
	conf := fmt.Sprintf("[libvirt]\nnetwork = %q\nvm_id_base = %d\n", b.opts.vmNetwork, config.DefaultVMIDBase+config.DefaultVMIDCount) + migrationSection(2)
	confPath := filepath.Join(n.dir, "crimux.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	bin, err := filepath.Abs(b.opts.crimuxBin)
	if err != nil {
		return err
	}
	script, err := filepath.Abs(node2ExecScript)
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	_ = os.Remove(n.socket)
	// node2-exec.sh execs nsenter, which execs crimux: the process is
	// crimux's own.
	n.cmd = exec.Command(script, bin, "--config", confPath, "--listen", n.socket, "--state-dir", filepath.Join(n.dir, "state"),
		"--containerd-endpoint", b.opts.containerd, "--vm-accel", "tcg", "--cni-conf-dir", node2CNIConfDir)
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	if err := n.cmd.Start(); err != nil {
		n.cmd = nil
		return err
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(n.cmd, n.exited)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = waitUntil(wctx, 20*time.Millisecond, func() error {
		select {
		case <-n.exited:
			return errors.New("exited at start")
		default:
		}
		_, err := os.Stat(n.socket)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; last log lines:\n%s", err, n.logTail())
	}
	if n.cri, err = criclient.Dial("crimux on node two", "unix://"+n.socket); err != nil {
		return err
	}
	n.vm = vmv1.NewVMServiceClient(n.cri.Conn)
	if err := waitVMRuntimeOn(ctx, n.cri); err != nil {
		return fmt.Errorf("%w; last log lines:\n%s", err, n.logTail())
	}
	b.logf("migrate: node two's crimux (pid %d) on %s, state %s", n.cmd.Process.Pid, n.socket, n.dir)
	return nil
}

func (n *node2) logTail() string {
	data, _ := os.ReadFile(n.logPath)
	return lastLines(string(data), 20)
}

// startTarget makes the VM pod on node two that src's VM moves to: the
// same container (image, vCPUs, memory), annotated crimux.io/migrate-from,
// its container started (running, no qemu, waiting). It is remembered
// for downNode2 even when a step fails.
func (b *bench) startTarget(ctx context.Context, n *node2, src *vmPod, ctrCfg *runtimeapi.ContainerConfig) (*vmPod, error) {
	v, err := b.newVMPod(src.name + "-target")
	if err != nil {
		return nil, err
	}
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	cfg := b.vmPodConfig(v)
	cfg.Annotations = map[string]string{vm.AnnotationMigrateFrom: namespace + "/" + src.name}
	pod, err := n.cri.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "vm"})
	if err != nil {
		return v, fmt.Errorf("node two: runp %s: %w", v.name, err)
	}
	v.pod = pod.PodSandboxId
	n.pods = append(n.pods, v)
	ctr, err := n.cri.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: v.pod, Config: ctrCfg, SandboxConfig: cfg})
	if err != nil {
		return v, fmt.Errorf("node two: create %s: %w", v.name, err)
	}
	v.container = ctr.ContainerId
	if _, err := n.cri.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: v.container}); err != nil {
		return v, fmt.Errorf("node two: start %s: %w", v.name, err)
	}
	return v, nil
}

// removeTarget removes a VM pod of node two (its VM destroyed at once)
// and its cgroup parent.
func (n *node2) removeTarget(ctx context.Context, v *vmPod) error {
	if v == nil || v.pod == "" {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	if v.container != "" {
		_, _ = n.cri.RT.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: v.container, Timeout: 0})
	}
	if err := criclient.RemovePod(ctx, n.cri, v.pod); err != nil {
		return err
	}
	for i, w := range n.pods {
		if w == v {
			n.pods = append(n.pods[:i], n.pods[i+1:]...)
			break
		}
	}
	cgroups.Remove(v.cgroupParent)
	return nil
}

// downNode2 undoes upNode2, whatever of it was done: node two's pods and
// crimux, node one's crimux back to its config without migration, node
// two itself. It logs what it cannot undo.
func (b *bench) downNode2(ctx context.Context, n *node2) {
	ctx = context.WithoutCancel(ctx)
	warn := func(what string, err error) {
		if err != nil {
			b.logf("migrate: cleanup: %s: %v", what, err)
		}
	}
	if n == nil {
		return
	}
	for _, v := range append([]*vmPod(nil), n.pods...) {
		warn("node two's pod "+v.name, n.removeTarget(ctx, v))
	}
	if n.cri != nil {
		n.cri.Close()
	}
	n.stop()
	_ = os.Remove(n.socket)
	if data, err := os.ReadFile(n.logPath); err == nil && b.opts.logDir != "" && os.MkdirAll(b.opts.logDir, 0o755) == nil {
		_ = os.WriteFile(filepath.Join(b.opts.logDir, "crimux-node2.log"), data, 0o644)
	}
	warn("node two's crimux state", os.RemoveAll(n.dir))
	if n.node1Restarted {
		warn("node one's crimux as it was", b.restartCrimux(ctx, false, ""))
	}
	out, err := b.bedScript(ctx, node2DownScript)
	warn("node two", err)
	if err == nil {
		b.logf("migrate: %s", lastLines(out, 1))
	}
}

// stop ends node two's crimux with SIGTERM (SIGKILL after 20 s).
func (n *node2) stop() {
	if n.cmd == nil || n.exited == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// ensureTraversable makes dir if missing; qemu's users must reach the
// socket in it (crimux could make it under a umask of 0117: bench.go).
func ensureTraversable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o011 != 0o011 {
		return os.Chmod(dir, st.Mode().Perm()|0o011)
	}
	return nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
