// Package daemon owns the crimux process under test: its config, state
// dir and socket, starting, SIGKILLing and stopping it, its memory and CPU
// time, the identity it stamps on its domains, and the bench's copy of the
// qemu wrapper its VMs are started through.
package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crimux/crimux/internal/identity"
)

// Daemon is the crimux process under test: started, SIGKILLed and
// restarted by the bench, on one state dir and socket.
type Daemon struct {
	bin, socket string
	// LogPath is crimux's log (stdout and stderr) of the run.
	LogPath string
	args    []string
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
	// its config's path and what New wrote there (Reconfigure rewrites it)
	confPath, vmNetwork, wrapper string
	libvirtSettings              []string
}

// New prepares crimux with its config, state dir and socket; the
// config points the VM runtime at the bench's own qemu wrapper and
// placement socket when wrapper is set (see InstallWrapper), and gives
// VM pods the network vmNetwork names ("cni", crimux's default, or
// "none"); libvirtSettings are more `key = value` lines of the [libvirt]
// section.
func New(bin, dir, socket, containerd, wrapper, vmNetwork string, libvirtSettings ...string) (*Daemon, error) {
	d := &Daemon{
		bin: bin, socket: socket, LogPath: filepath.Join(dir, "crimux.log"),
		confPath: filepath.Join(dir, "crimux.toml"), vmNetwork: vmNetwork, wrapper: wrapper, libvirtSettings: libvirtSettings,
	}
	if err := d.Reconfigure(false, ""); err != nil {
		return nil, err
	}
	cniDir, err := writeCNIConf(dir)
	if err != nil {
		return nil, err
	}
	d.args = []string{
		"--config", d.confPath, "--listen", socket, "--state-dir", filepath.Join(dir, "state"),
		"--containerd-endpoint", containerd, "--vm-accel", "tcg",
		"--cni-conf-dir", cniDir,
	}
	return d, nil
}

// Reconfigure rewrites crimux's config as New wrote it, with crimux's
// default qemu wrapper and placement socket (the bed's) instead of the
// bench's if bedWrapper is set, followed by extra (TOML tables, such as
// [libvirt.migration]; "" for none). It takes effect at the next Start.
func (d *Daemon) Reconfigure(bedWrapper bool, extra string) error {
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "[libvirt]\nnetwork = %q\n", d.vmNetwork)
	for _, s := range d.libvirtSettings {
		fmt.Fprintln(&conf, s)
	}
	if d.wrapper != "" && !bedWrapper {
		fmt.Fprintf(&conf, "emulator = %q\nplacement_socket = %q\n", d.wrapper, PlacementSocket)
	}
	conf.WriteString(extra)
	return os.WriteFile(d.confPath, conf.Bytes(), 0o644)
}

// Bridge is the bench's VM pod network's bridge (see writeCNIConf).
const Bridge = "crimuxbench0"

// writeCNIConf writes the VM pods' network: the bed's (bridge, host-local,
// portmap) with a /16 of its own, since the bed's /24 holds fewer
// addresses than the scale figures' VM pods and the container pods need
// together. Its addresses are kept in the run's dir.
func writeCNIConf(dir string) (string, error) {
	confDir := filepath.Join(dir, "cni", "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "crimux-bench",
  "plugins": [
    {
      "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, Bridge, filepath.Join(dir, "cni", "networks"))
	return confDir, os.WriteFile(filepath.Join(confDir, "10-crimux-bench.conflist"), []byte(conf), 0o644)
}

// InstanceOf is the identity crimux stamps on its domains: the one
// derived for its state dir (the bench starts from an empty one).
func InstanceOf(dir string) string {
	return identity.Derive(filepath.Join(dir, "state"))
}

// Start runs crimux and returns once its socket exists; the caller waits
// for the answers it needs.
func (d *Daemon) Start() error {
	if d.logFile == nil {
		f, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		d.logFile = f
	}
	_ = os.Remove(d.socket)
	cmd := exec.Command(d.bin, d.args...)
	cmd.Stdout, cmd.Stderr = d.logFile, d.logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start crimux: %w", err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(d.exited)
	return nil
}

// WaitSocket waits until crimux's socket exists (it listens then).
func (d *Daemon) WaitSocket(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(d.socket); err == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("crimux exited at start (%s); last log lines:\n%s", d.cmd.ProcessState, d.tail(20))
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("crimux did not listen on %s within %s; last log lines:\n%s", d.socket, timeout, d.tail(20))
}

// Kill SIGKILLs crimux, as a crash or the OOM killer would.
func (d *Daemon) Kill() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// Stop ends crimux with SIGTERM (SIGKILL after 20 s).
func (d *Daemon) Stop() {
	if d.cmd == nil {
		return
	}
	select {
	case <-d.exited:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(20 * time.Second):
			d.Kill()
		}
	}
	if d.logFile != nil {
		_ = d.logFile.Close()
		d.logFile = nil
	}
}

func (d *Daemon) pid() int { return d.cmd.Process.Pid }

// RSSMiB is crimux's resident memory (VmRSS) in MiB.
func (d *Daemon) RSSMiB() (float64, error) {
	return rssOf(d.pid())
}

func rssOf(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/<pid>/status")
}

// tail is the end of crimux's log, for error messages.
func (d *Daemon) tail(lines int) string {
	b, _ := os.ReadFile(d.LogPath)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// CPUTime is the CPU time (user + system) crimux has used so far, at the
// kernel's clock-tick resolution.
func (d *Daemon) CPUTime() time.Duration { return ProcessCPUTime(d.pid()) }

// ProcessCPUTime is the user and system CPU time pid has used (0 if it
// cannot be read).
func ProcessCPUTime(pid int) time.Duration {
	own, _ := processTimes(pid)
	return own
}

// ChildrenCPUTime is the CPU time crimux's children that it waited for
// have used (the CNI plugins, qemu-img): cutime + cstime.
func (d *Daemon) ChildrenCPUTime() time.Duration {
	_, children := processTimes(d.pid())
	return children
}

// processTimes reads pid's own CPU time and its waited-for children's
// from /proc/PID/stat (0 if it cannot be read).
func processTimes(pid int) (own, children time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command (which may hold spaces) start after ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return 0, 0
	}
	ticks := func(i int) time.Duration { return Ticks(fields[i]) }
	return ticks(11) + ticks(12), ticks(13) + ticks(14)
}

// Ticks is a CPU time /proc gives in clock ticks (USER_HZ, 100 on
// Linux) as a duration; 0 if field is not a number.
func Ticks(field string) time.Duration {
	n, _ := strconv.ParseInt(field, 10, 64)
	const ticksPerSecond = 100
	return time.Duration(n) * time.Second / ticksPerSecond
}
