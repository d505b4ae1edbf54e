package rawproxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// The bench runs the forwarder as a process of its own, as crimux is: in
// the bench's process it shares the client's scheduler, and its goroutines
// wake without the cross-process futex and epoll wake-ups crimux pays, which
// made it ~150 µs faster per call here than the same code in a process of
// its own (docs/benchmarks.md): a baseline crimux could never reach.

// ServeFlag is the bench's flag that makes it the forwarder's process.
const ServeFlag = "serve-rawproxy"

// Serve runs the forwarder on socket in front of upstream until ctx ends:
// the body of the forwarder's process.
func Serve(ctx context.Context, socket, upstream string) error {
	p, err := Start(socket, upstream)
	if err != nil {
		return err
	}
	<-ctx.Done()
	p.Close()
	return nil
}

// Process is the forwarder running as a child process.
type Process struct {
	cmd    *exec.Cmd
	socket string
	exited chan struct{}
}

// StartProcess runs bin (the bench itself) with -serve-rawproxy socket and
// -containerd upstream, and waits until it listens.
func StartProcess(bin, socket, upstream string) (*Process, error) {
	_ = os.Remove(socket)
	cmd := exec.Command(bin, "-"+ServeFlag, socket, "-containerd", upstream)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rawproxy: %w", err)
	}
	p := &Process{cmd: cmd, socket: socket, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := os.Stat(socket); err == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("rawproxy: the forwarder's process exited at start (%s)", cmd.ProcessState)
		case <-time.After(5 * time.Millisecond):
		}
	}
	p.Stop()
	return nil, fmt.Errorf("rawproxy: the forwarder did not listen on %s within 10s", socket)
}

// Addr is the forwarder's gRPC target.
func (p *Process) Addr() string { return "unix://" + p.socket }

// Pid is the forwarder's process ID (for its CPU time).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop ends the forwarder (SIGTERM, SIGKILL after 5 s).
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	_ = os.Remove(p.socket)
}
