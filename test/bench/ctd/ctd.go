// Package ctd runs the bench's own containerd: the test bed's binary and
// config, on a root, state, socket, runc root, NRI socket and shim socket
// dir of the run's own, in a mount namespace of its own as the bed runs
// its containerd (test/bed/up.sh). Both paths the bench compares — crimux
// and containerd's socket — use it.
//
// A run ends it by kill (Kill): containerd, its shims and the processes
// in the run's pod cgroups SIGKILLed, its dirs removed; the mounts it made
// (overlay rootfs, shm) go with its mount namespace. Removing the scale
// figures' 700 container pods one CRI call at a time took the bed's
// containerd 3 minutes of both cores here (runc twice and a shim exit per
// pod); the kill takes seconds. Pods on a pod network must be removed
// through CRI first (their CNI addresses live in the bed's IPAM): Kill
// does not run CNI.
package ctd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/crimux/crimux/test/bench/cgroups"
)

// StateBase is where the runs' containerd state dirs live, one per run
// (ctd-<run>): short, as containerd limits its shim socket dir to 42
// characters.
const StateBase = "/run/crimux-bench"

// Containerd is a running containerd of the run's own.
type Containerd struct {
	// Root is its root (images, snapshots, metadata), State its state
	// dir (sockets, tasks, runc root).
	Root, State string
	// Socket is its gRPC socket.
	Socket string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
	run    string
	pid    int // a dead run's (Leftover)
}

// Leftover is the containerd a run that ended without its clean-up may
// have left running (its pid as Start wrote it), for Kill; nil if the
// run left no state dir.
func Leftover(run string) *Containerd {
	state := StateDir(run)
	if _, err := os.Stat(state); err != nil {
		return nil
	}
	data, _ := os.ReadFile(filepath.Join(state, "containerd.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return &Containerd{State: state, Socket: filepath.Join(state, "containerd.sock"), run: run, pid: pid}
}

// Runs are the runs whose containerd state dirs are on the host.
func Runs() []string {
	dirs, _ := filepath.Glob(filepath.Join(StateBase, "ctd-*"))
	var out []string
	for _, d := range dirs {
		out = append(out, strings.TrimPrefix(filepath.Base(d), "ctd-"))
	}
	return out
}

func exe(pid int) string {
	p, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return p
}

// Endpoint is the CRI endpoint of the socket.
func (c *Containerd) Endpoint() string { return "unix://" + c.Socket }

// StateDir is run's containerd state dir.
func StateDir(run string) string { return filepath.Join(StateBase, "ctd-"+run) }

// Start starts bin (the bed's containerd) with the bed's config at
// bedConfig, its paths replaced by root (the run's, under its state dir)
// and StateDir(run). The shim and runc binaries are looked up in bin's
// dir first, as the bed does.
func Start(bin, bedConfig, root, run string) (*Containerd, error) {
	state := StateDir(run)
	c := &Containerd{Root: root, State: state, Socket: filepath.Join(state, "containerd.sock"), run: run, exited: make(chan struct{})}
	data, err := os.ReadFile(bedConfig)
	if err != nil {
		return nil, fmt.Errorf("the bed's containerd config: %w (run make bed)", err)
	}
	conf, err := Config(data, root, state)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{root, state} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	confPath := filepath.Join(state, "config.toml")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, err
	}
	if c.log, err = os.Create(filepath.Join(state, "containerd.log")); err != nil {
		return nil, err
	}
	c.cmd = exec.Command("unshare", "--mount", "--propagation", "shared", "--", bin, "--config", confPath)
	c.cmd.Dir = "/"
	c.cmd.Env = []string{"PATH=" + filepath.Dir(bin) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.cmd.Start(); err != nil {
		c.log.Close()
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	if err := os.WriteFile(filepath.Join(state, "containerd.pid"), []byte(strconv.Itoa(c.cmd.Process.Pid)), 0o644); err != nil {
		return c, err
	}
	return c, nil
}

// Config is the bed's containerd config with its paths made the run's:
// root, state, the gRPC and ttrpc sockets, the shim socket dir, the NRI
// socket and runc's root. Everything else (CRI, CNI, registry mirrors,
// snapshotter, runtimes) stays the bed's.
func Config(bed []byte, root, state string) ([]byte, error) {
	var m map[string]any
	if err := toml.Unmarshal(bed, &m); err != nil {
		return nil, fmt.Errorf("the bed's containerd config: %w", err)
	}
	sock := filepath.Join(state, "containerd.sock")
	m["root"], m["state"] = root, state
	sets := []struct {
		path  []string
		value string
	}{
		{[]string{"plugins", "io.containerd.server.v1.grpc", "address"}, sock},
		{[]string{"plugins", "io.containerd.server.v1.ttrpc", "address"}, sock + ".ttrpc"},
		{[]string{"plugins", "io.containerd.shim.v1.manager", "socket_dir"}, filepath.Join(state, "s")},
		{[]string{"plugins", "io.containerd.nri.v1.nri", "socket_path"}, filepath.Join(state, "nri.sock")},
	}
	for _, s := range sets {
		if err := set(m, s.path, s.value); err != nil {
			return nil, err
		}
	}
	runtimes, err := table(m, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes")
	if err != nil {
		return nil, err
	}
	for name := range runtimes {
		if err := set(runtimes, []string{name, "options", "Root"}, filepath.Join(state, "runc")); err != nil {
			return nil, err
		}
	}
	var out bytes.Buffer
	if err := toml.NewEncoder(&out).Encode(m); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// table is the table at path in m, which must be there.
func table(m map[string]any, path ...string) (map[string]any, error) {
	for i, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the bed's containerd config has no table %s", strings.Join(path[:i+1], "."))
		}
		m = next
	}
	return m, nil
}

// set sets the key at the end of path, whose tables must be there.
func set(m map[string]any, path []string, value string) error {
	t, err := table(m, path[:len(path)-1]...)
	if err != nil {
		return err
	}
	t[path[len(path)-1]] = value
	return nil
}

// Wait waits until ready answers (containerd's CRI serves), or the
// process exits, or timeout passes.
func (c *Containerd) Wait(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited (log: %s)", c.log.Name())
		case <-ctx.Done():
			return fmt.Errorf("containerd not ready after %s: %w (log: %s)", timeout, err, c.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill ends containerd and everything it started: containerd, its shims
// (by the socket they serve), then the processes in the run's container
// pods' cgroup (cgroups.ContainerPods), then removes its root and state.
// The log is kept in logDir if set.
func (c *Containerd) Kill(logDir string) error {
	switch {
	case c.cmd != nil && c.cmd.Process != nil:
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
		}
	case c.pid > 0 && strings.HasSuffix(exe(c.pid), "/containerd"):
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
	}
	var errs []error
	// The shims before the pods' processes: a shim that saw its
	// container die would run runc for it. The containers' inits then go
	// to PID 1 to be reaped, as the shims themselves do.
	errs = append(errs, killShims(c.Socket), cgroups.Kill(cgroups.ContainerPods(c.run), 10*time.Second))
	if c.log != nil {
		c.log.Close()
		if logDir != "" && os.MkdirAll(logDir, 0o755) == nil {
			if data, err := os.ReadFile(c.log.Name()); err == nil {
				_ = os.WriteFile(filepath.Join(logDir, "containerd.log"), data, 0o644)
			}
		}
	}
	errs = append(errs, os.RemoveAll(c.State))
	if c.Root != "" {
		errs = append(errs, os.RemoveAll(c.Root))
	}
	return errors.Join(errs...)
}

// killShims SIGKILLs the shims serving socket (their command line names
// it after -address) and waits for them to go.
func killShims(socket string) error {
	want := "-address\x00" + socket + "\x00"
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte(want)) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("shim %d still there after SIGKILL", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command, which may itself hold ") ": read
	// after the last ')', as daemon.processTimes does.
	i := bytes.LastIndexByte(data, ')')
	rest := bytes.TrimLeft(data[i+1:], " ")
	return i >= 0 && len(rest) > 0 && rest[0] == 'Z'
}
